"""The files `engram setup` configures, read and written safely: atomically (a temporary file in
the same directory, then a rename, so a client never reads half a file), 0600 for those holding
a key or a token, through a symlink to its target (dotfiles kept in a repository stay links), and
the previous version kept beside a file that changes."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from app.setup.service import Unmergeable

PRIVATE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def resolved(path: Path) -> Path:
    """Where writing `path` lands: a symlink's target, so the link itself stays."""
    return path.resolve() if path.is_symlink() else path


def read(path: Path) -> str | None:
    """The file's text, or None when there is no file."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise Unmergeable("not UTF-8 text") from None


def is_private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def make_private(path: Path) -> None:
    os.chmod(path, PRIVATE_MODE)


def write(path: Path, text: str, *, private: bool) -> None:
    """`text` into `path` at once: parents created (0700 when the file is private), mode 0600
    for a private file, an existing file's mode kept otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE if private else 0o777)
    if private:
        mode = PRIVATE_MODE
    elif path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def keep_previous(path: Path) -> Path:
    """A copy of `path` beside it (`<name>.bak-<time>`), 0600: it may hold a key."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for n in range(1, 100):
        backup = path.with_name(f"{path.name}.bak-{stamp}" + (f"-{n}" if n > 1 else ""))
        try:
            # created 0600 from the start: no moment where another user could read it
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out, path.open("rb") as previous:
            shutil.copyfileobj(previous, out)
        return backup
    raise FileExistsError(f"no free backup name beside {path}")
