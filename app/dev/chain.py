"""An offline local EVM chain for x402 payment tests and `engram serve --dev-chain`.

`DevChain` runs anvil (from the npm package `@foundry-rs/anvil`, installed by `npm install` into
the checkout's `node_modules/`, or for an installed Engram into a per-user directory holding the
manifest shipped in the package; nothing is downloaded from anywhere else) and can
place a USDC-like EIP-3009 token (`contracts/usdc_eip3009.vy`, compiled offline with the `vyper`
package, from the `dev` extra) at the REAL Base USDC address, so that stock x402 defaults (asset
address and EIP-712 domain name/version per network) apply unchanged.

Name/version per network: the token has no constructor (its runtime code is installed with
`anvil_setCode`), so it keeps name/version in storage, set once by an `initialize(name, version)`
call right after the code is installed. The values come from x402's own default-asset table:
"USD Coin"/"2" on Base (8453), "USDC"/"2" on Base Sepolia (84532).

`install_batch_settlement` places the x402 batch-settlement scheme's escrow
(`contracts/batch_settlement.vy`) and its two deposit collectors, ERC-3009
(`contracts/erc3009_deposit_collector.vy`) and Permit2 (`contracts/permit2_deposit_collector.vy`),
at the scheme's deterministic addresses; and, when the chain has none, the parts of Permit2
(`contracts/permit2_subset.vy`) and of Multicall3 (`contracts/multicall3_subset.vy`, which x402's
facilitator reads through) that x402 uses, at their well-known addresses. So x402's stock
batch-settlement client and facilitator work unchanged. All are written for the dev chain from
the published interfaces.

Everything here is synchronous (web3 HTTPProvider); async callers run it in a worker thread.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import logging
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import platformdirs
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_typing import ChecksumAddress, HexStr
from web3 import Web3
from web3.types import RPCEndpoint, TxParams
from x402.mechanisms.evm.batch_settlement.constants import (
    BATCH_SETTLEMENT_ADDRESS,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
)
from x402.mechanisms.evm.constants import (
    MULTICALL3_ADDRESS,
    PERMIT2_ADDRESS,
    X402_UPTO_PERMIT2_PROXY_ADDRESS,
)

from app.infra.project_files import from_checkout, shipped

log = logging.getLogger(__name__)

CONTRACTS = Path(__file__).with_name("contracts")
TOKEN_SOURCE = CONTRACTS / "usdc_eip3009.vy"
ESCROW_SOURCE = CONTRACTS / "batch_settlement.vy"
ERC3009_COLLECTOR_SOURCE = CONTRACTS / "erc3009_deposit_collector.vy"
PERMIT2_COLLECTOR_SOURCE = CONTRACTS / "permit2_deposit_collector.vy"
PERMIT2_SOURCE = CONTRACTS / "permit2_subset.vy"
MULTICALL3_SOURCE = CONTRACTS / "multicall3_subset.vy"
UPTO_PROXY_SOURCE = CONTRACTS / "upto_permit2_proxy.vy"
ANVIL_NPM_PACKAGE = "@foundry-rs/anvil"
NPM_MANIFEST = ("package.json", "package-lock.json")
DEFAULT_CHAIN_ID = 8453
HOST = "127.0.0.1"

NPM_INSTALL_TIMEOUT_S = 600.0
STARTUP_TIMEOUT_S = 30.0
RECEIPT_TIMEOUT_S = 30.0
RELAYER_ETH_WEI = 1_000 * 10**18

# npm's platform packages for the anvil binary: (sys.platform, machine) -> package suffix.
_PLATFORM_PACKAGES = {
    ("linux", "x86_64"): "linux-amd64",
    ("linux", "amd64"): "linux-amd64",
    ("linux", "aarch64"): "linux-arm64",
    ("linux", "arm64"): "linux-arm64",
    ("darwin", "x86_64"): "darwin-amd64",
    ("darwin", "arm64"): "darwin-arm64",
    ("win32", "amd64"): "win32-amd64",
    ("win32", "x86_64"): "win32-amd64",
}


# How to get the Python side of these tools (vyper); anvil comes from npm (see anvil_binary).
DEV_EXTRA_INSTALL = "pip install 'engram-x402[dev]' (in a checkout: pip install -e '.[dev]')"


class DevChainError(RuntimeError):
    """The local chain could not be installed, started or set up (the message says why)."""


def require_dev_extra() -> None:
    """Raise DevChainError naming the `dev` extra when its packages are not installed: a
    production install of Engram leaves them out."""
    _vyper()


def _vyper() -> Any:
    try:
        import vyper  # type: ignore[import-untyped]  # no type information published
    except ImportError as exc:
        raise DevChainError(
            f"the dev chain needs the dev extra ({exc.name or 'vyper'} is not installed): "
            f"{DEV_EXTRA_INSTALL}"
        ) from exc
    return vyper


# ---------------------------------------------------------------------------------------------
# The anvil binary
# ---------------------------------------------------------------------------------------------

_install_lock = threading.Lock()
_npm_install_attempted: set[Path] = set()  # project roots, so: once per process


def _binary_name() -> str:
    return "anvil.exe" if sys.platform == "win32" else "anvil"


def _anvil_candidates(root: Path) -> list[Path]:
    scope = root / "node_modules" / "@foundry-rs"
    candidates: list[Path] = []
    suffix = _PLATFORM_PACKAGES.get((sys.platform, platform.machine().lower()))
    if suffix is not None:
        # What npm installs: the optional dependency matching this platform ships the binary.
        candidates.append(scope / f"anvil-{suffix}" / "bin" / _binary_name())
    # Where the package's postinstall script writes the binary when optional dependencies were
    # skipped (it fetches the same platform package from the npm registry).
    candidates.append(scope / "anvil" / _binary_name())
    return candidates


def _find_anvil(root: Path) -> Path | None:
    for candidate in _anvil_candidates(root):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def devtools_root() -> Path:
    """Where the npm manifest (package.json, package-lock.json) is and anvil gets installed.

    A checkout's own root; for an installed Engram (a wheel), `devtools/` in the per-user data
    directory (ENGRAM_DATA_DIR's parent rule, as for the embedded PostgreSQL) with the manifest
    copied from the package: npm never writes into site-packages.
    """
    if from_checkout():
        return shipped("package.json").parent
    override = os.environ.get("ENGRAM_DATA_DIR")
    parent = Path(override).expanduser() if override else platformdirs.user_data_path("engram")
    root = parent / "devtools"
    root.mkdir(parents=True, exist_ok=True)
    for name in NPM_MANIFEST:
        source, copy = shipped(name), root / name
        if not copy.is_file() or copy.read_bytes() != source.read_bytes():
            shutil.copyfile(source, copy)
    return root


def anvil_binary(project_root: Path | None = None) -> Path:
    """Path of the anvil binary from the project's `node_modules/`.

    If it is missing, or another package of the manifest is (a `node_modules/` installed before
    the package was added), runs the project's own install step (`npm install --no-audit
    --no-fund` in the project root, which reads `package.json`/`package-lock.json`) once per
    process. Raises DevChainError with a clear message when anvil is missing and npm is missing
    or the install fails (typically: offline); with anvil there, a failed install only warns.
    """
    project_root = project_root or devtools_root()
    with _install_lock, _installing(project_root):
        found = _find_anvil(project_root)
        if found is not None and not _missing_packages(project_root):
            return found
        if project_root not in _npm_install_attempted:
            _npm_install_attempted.add(project_root)
            try:
                _npm_install(project_root)
            except DevChainError as exc:
                if found is None:
                    raise
                log.warning("npm packages missing beside anvil: %s", exc)
            found = _find_anvil(project_root)
        if found is not None:
            return found
    looked = "\n  ".join(str(p) for p in _anvil_candidates(project_root))
    raise DevChainError(
        f"anvil binary not found for {sys.platform}/{platform.machine()} although `npm install` "
        f"was run in {project_root} (once per process; see the first error); looked at:\n  "
        f"{looked}"
    )


def npm_packages(project_root: Path | None = None) -> Path:
    """The directory whose `node_modules/` holds every package of the npm manifest at its pinned
    version (anvil, and x402's TypeScript client that tests/payments/test_npm_client.py runs),
    after the project's install step when one is missing. Raises DevChainError as anvil_binary
    does."""
    project_root = project_root or devtools_root()
    with _install_lock, _installing(project_root):
        missing = _missing_packages(project_root)
        if missing and project_root not in _npm_install_attempted:
            _npm_install_attempted.add(project_root)
            _npm_install(project_root)
            missing = _missing_packages(project_root)
    if missing:
        raise DevChainError(
            f"npm packages {', '.join(missing)} are not in {project_root / 'node_modules'} "
            "although `npm install` was run there (once per process; see the first error)"
        )
    return project_root


def _missing_packages(root: Path) -> list[str]:
    """The manifest's dependencies (`name@version`) not installed at their pinned version: an
    existing `node_modules/` gets a package added to the manifest after it was installed."""
    try:
        manifest = json.loads((root / "package.json").read_text())
    except (OSError, ValueError):
        return []  # no manifest: nothing to check (_npm_install says it is missing)
    missing = []
    for name, version in (manifest.get("dependencies") or {}).items():
        try:
            installed = json.loads((root / "node_modules" / name / "package.json").read_text())
        except (OSError, ValueError):
            installed = {}
        if installed.get("version") != version:
            missing.append(f"{name}@{version}")
    return missing


@contextlib.contextmanager
def _installing(root: Path) -> Iterator[None]:
    """One process at a time looks for anvil or installs it under `root`: the suite's workers
    (and several `engram serve --dev-chain`) start at once on a fresh checkout, and running the
    binary while another process's npm is still writing it fails (ETXTBSY)."""
    with (root / ".engram-npm-install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _npm_install(root: Path) -> None:
    if not (root / "package.json").is_file():
        raise DevChainError(
            f"{root / 'package.json'} is missing: cannot install {ANVIL_NPM_PACKAGE}"
        )
    npm = shutil.which("npm")
    if npm is None:
        raise DevChainError(
            f"anvil (npm package {ANVIL_NPM_PACKAGE}) is not installed and `npm` is not on PATH. "
            f"Install Node.js >= 20 with npm, then run `npm install` in {root}."
        )
    cmd = [npm, "install", "--no-audit", "--no-fund"]
    log.info("installing %s: %s (in %s)", ANVIL_NPM_PACKAGE, " ".join(cmd), root)
    # Output goes to a file, not a pipe (a pipe that fills up would block npm).
    with tempfile.TemporaryFile("w+") as out:
        try:
            proc = subprocess.run(
                cmd,
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=NPM_INSTALL_TIMEOUT_S,
                text=True,
            )
        except subprocess.TimeoutExpired:
            raise DevChainError(
                f"`npm install` in {root} did not finish in {NPM_INSTALL_TIMEOUT_S:.0f} s "
                "(is the npm registry reachable?)"
            ) from None
        out.seek(0)
        output = out.read()
    if proc.returncode != 0:
        hint = ""
        lowered = output.lower()
        if any(s in lowered for s in ("enotfound", "eai_again", "econnrefused", "etimedout")):
            hint = " The npm registry is unreachable (offline?)."
        raise DevChainError(
            f"`npm install` in {root} failed (exit {proc.returncode}).{hint} "
            f"anvil comes from the npm package {ANVIL_NPM_PACKAGE}; run `npm install` there "
            f"once while online.\n--- npm output ---\n{output[-4000:]}"
        )


# ---------------------------------------------------------------------------------------------
# The contracts
# ---------------------------------------------------------------------------------------------


@functools.cache
def _compiled(source: Path) -> tuple[bytes, list[dict[str, Any]]]:
    """(runtime bytecode, ABI) of one of the dev contracts, compiled once per process."""
    out = _vyper().compile_code(
        source.read_text(),
        contract_path=str(source),
        output_formats=["bytecode_runtime", "abi"],
    )
    runtime = bytes.fromhex(str(out["bytecode_runtime"]).removeprefix("0x"))
    return runtime, cast(list[dict[str, Any]], out["abi"])


def _compiled_token() -> tuple[bytes, list[dict[str, Any]]]:
    return _compiled(TOKEN_SOURCE)


def token_abi() -> list[dict[str, Any]]:
    """ABI of the dev USDC (the bytes-signature `transferWithAuthorization` overload is served
    by the fallback, so it is not listed: x402's own ABI constant covers it)."""
    return _compiled_token()[1]


def escrow_abi() -> list[dict[str, Any]]:
    """ABI of the dev batch-settlement escrow (its reverts are the scheme's custom errors,
    raised as raw data, so they are not listed)."""
    return _compiled(ESCROW_SOURCE)[1]


def deposit_collector_abi() -> list[dict[str, Any]]:
    """ABI of the dev ERC-3009 deposit collector."""
    return _compiled(ERC3009_COLLECTOR_SOURCE)[1]


def permit2_deposit_collector_abi() -> list[dict[str, Any]]:
    """ABI of the dev Permit2 deposit collector."""
    return _compiled(PERMIT2_COLLECTOR_SOURCE)[1]


def permit2_abi() -> list[dict[str, Any]]:
    """ABI of the dev chain's Permit2 subset."""
    return _compiled(PERMIT2_SOURCE)[1]


def upto_proxy_abi() -> list[dict[str, Any]]:
    """ABI of the dev chain's x402 upto Permit2 proxy (its reverts are raw custom errors)."""
    return _compiled(UPTO_PROXY_SOURCE)[1]


def usdc_defaults(chain_id: int) -> tuple[str, str, str]:
    """(address, EIP-712 name, EIP-712 version) of USDC on `chain_id`, from x402's defaults."""
    from x402.mechanisms.evm.default_assets import get_default_asset

    try:
        asset = get_default_asset(f"eip155:{chain_id}")
    except Exception as exc:
        raise DevChainError(
            f"x402 knows no default USDC for chain {chain_id}: pass address/name/version"
        ) from exc
    return str(asset["asset"]), str(asset["name"]), str(asset["version"])


# ---------------------------------------------------------------------------------------------
# The chain
# ---------------------------------------------------------------------------------------------


class DevChain:
    """A throwaway anvil chain (context manager).

    `relayer` is a fresh account (or `relayer_key`) funded with ETH, meant to pay gas for
    settlement (x402's `FacilitatorWeb3Signer(private_key=..., rpc_url=chain.rpc_url)`). Setup
    transactions (`initialize`, `mint`) are sent from anvil's own unlocked dev account, so they
    never race the relayer's nonces.
    """

    def __init__(
        self,
        chain_id: int = DEFAULT_CHAIN_ID,
        port: int | None = None,
        *,
        relayer_key: str | None = None,
        log_file: Path | None = None,
        project_root: Path | None = None,  # default: devtools_root()
        startup_timeout: float = STARTUP_TIMEOUT_S,
    ) -> None:
        self.chain_id = chain_id
        self.relayer: LocalAccount = (
            Account.from_key(relayer_key) if relayer_key else Account.create()
        )
        self.usdc_address: ChecksumAddress | None = None
        self.escrow_address: ChecksumAddress | None = None
        self._requested_port = port
        self._log_file = log_file
        self._project_root = project_root
        self._startup_timeout = startup_timeout
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._owns_log = False
        self._w3: Web3 | None = None
        self._setup_account: ChecksumAddress | None = None
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> DevChain:
        with self._lock:
            if self._proc is not None:
                return self
            binary = anvil_binary(self._project_root)
            self.usdc_address = None
            self.escrow_address = None
            self._open_log()
            try:
                attempts = 1 if self._requested_port else 3
                for attempt in range(attempts):
                    port = self._requested_port or _free_port()
                    try:
                        self._launch(binary, port)
                        break
                    except _PortInUse:
                        if attempt == attempts - 1:
                            raise DevChainError(f"anvil: port {port} is already in use") from None
                atexit.register(self.stop)
                self._after_start()
            except BaseException:
                self.stop()
                raise
            return self

    def stop(self) -> None:
        """Terminate anvil (its state is gone) and remove its temporary log. Idempotent."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                atexit.unregister(self.stop)
                _terminate(proc)
            if self._owns_log and self._log_path is not None:
                self._log_path.unlink(missing_ok=True)
                self._log_path = None
            self._w3 = None

    def __enter__(self) -> DevChain:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def port(self) -> int:
        if self._port is None:
            raise DevChainError("DevChain is not started")
        return self._port

    @property
    def rpc_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def network(self) -> str:
        """CAIP-2 id as x402 v2 spells it (e.g. "eip155:8453")."""
        return f"eip155:{self.chain_id}"

    @property
    def w3(self) -> Web3:
        if self._w3 is None:
            raise DevChainError("DevChain is not started")
        return self._w3

    def _open_log(self) -> None:
        if self._log_file is not None:
            self._log_path, self._owns_log = self._log_file, False
        else:
            fd, name = tempfile.mkstemp(prefix="engram-anvil-", suffix=".log")
            os.close(fd)
            self._log_path, self._owns_log = Path(name), True

    def _launch(self, binary: Path, port: int) -> None:
        """Start anvil on `port` and wait until it answers JSON-RPC with our chain id."""
        assert self._log_path is not None
        cmd = [
            str(binary),
            "--host",
            HOST,
            "--port",
            str(port),
            "--chain-id",
            str(self.chain_id),
            "--accounts",
            "1",  # the unlocked setup account; the relayer is a separate key
            "--quiet",  # errors still go to stderr (the log file)
        ]
        log.info("starting anvil: %s", " ".join(cmd))
        log_offset = self._log_path.stat().st_size if self._log_path.exists() else 0
        # Output goes to a file, not a pipe: nobody reads a pipe while anvil runs.
        with open(self._log_path, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        url = f"http://{HOST}:{port}"
        probe = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 2}))
        deadline = time.monotonic() + self._startup_timeout
        while True:
            if proc.poll() is not None:
                output = self._read_log(log_offset)
                if "address already in use" in output.lower():
                    raise _PortInUse
                raise DevChainError(f"anvil exited with {proc.returncode}:\n{output[-4000:]}")
            try:
                answered: int | None = probe.eth.chain_id
            except Exception:
                answered = None
            if answered is not None:
                break
            if time.monotonic() > deadline:
                _terminate(proc)
                raise DevChainError(
                    f"anvil did not answer JSON-RPC on {url} within "
                    f"{self._startup_timeout:.0f} s:\n{self._read_log(log_offset)[-4000:]}"
                )
            time.sleep(0.02)
        if answered != self.chain_id:
            _terminate(proc)
            raise DevChainError(f"{url} answers chain id {answered}, not {self.chain_id}")
        self._proc = proc
        self._port = port
        self._w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 30}))

    def _after_start(self) -> None:
        accounts = self.w3.eth.accounts
        if not accounts:
            raise DevChainError("anvil exposes no unlocked account")
        self._setup_account = accounts[0]
        self.set_eth_balance(self.relayer.address, RELAYER_ETH_WEI)

    def _read_log(self, offset: int = 0) -> str:
        if self._log_path is None:
            return ""
        try:
            with open(self._log_path, errors="replace") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return ""

    # -- raw helpers ---------------------------------------------------------------------------

    def rpc(self, method: str, params: list[Any]) -> Any:
        """Call any JSON-RPC method (e.g. anvil_*, evm_*); raises on an error response."""
        return self.w3.manager.request_blocking(RPCEndpoint(method), params)

    def set_eth_balance(self, address: str, wei: int) -> None:
        self.rpc("anvil_setBalance", [Web3.to_checksum_address(address), hex(wei)])

    def eth_balance(self, address: str) -> int:
        return int(self.w3.eth.get_balance(Web3.to_checksum_address(address)))

    def _send_setup_tx(self, to: ChecksumAddress, data: HexStr) -> None:
        if self._setup_account is None:
            raise DevChainError("DevChain is not started")
        tx: TxParams = {"from": self._setup_account, "to": to, "data": data}
        tx_hash = self.w3.eth.send_transaction(tx)
        receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT_S)
        if receipt["status"] != 1:
            raise DevChainError(f"setup transaction {tx_hash.hex()} to {to} reverted")

    # -- the token -----------------------------------------------------------------------------

    def install_usdc(
        self,
        address: str | None = None,
        *,
        name: str | None = None,
        version: str | None = None,
    ) -> ChecksumAddress:
        """Place the dev USDC at the real USDC address of this chain (or `address`) and store
        its EIP-712 name/version (x402's defaults for this chain unless given). Idempotent.
        Returns the checksummed token address."""
        with self._lock:
            if address is None or name is None or version is None:
                default_address, default_name, default_version = usdc_defaults(self.chain_id)
                address = address or default_address
                name = name if name is not None else default_name
                version = version if version is not None else default_version
            token = Web3.to_checksum_address(address)
            runtime, abi = _compiled_token()
            contract = self.w3.eth.contract(address=token, abi=abi)
            self._set_code(token, runtime)
            if contract.functions.initialized().call():
                stored = (contract.functions.name().call(), contract.functions.version().call())
                if stored != (name, version):
                    raise DevChainError(
                        f"token at {token} is already initialised as {stored}, not "
                        f"{(name, version)}"
                    )
            else:
                data = contract.encode_abi("initialize", args=[name, version])
                self._send_setup_tx(token, data)
            self.usdc_address = token
            return token

    # -- the batch-settlement escrow -----------------------------------------------------------

    def install_batch_settlement(self) -> ChecksumAddress:
        """Place the batch-settlement escrow at the scheme's deterministic address and its
        ERC-3009 and Permit2 deposit collectors at theirs (each bound to the escrow by
        `initialize`), plus Permit2's and Multicall3's subsets at their addresses when the
        chain has no code there. Idempotent. Returns the escrow's checksummed address."""
        with self._lock:
            escrow = Web3.to_checksum_address(BATCH_SETTLEMENT_ADDRESS)
            permit2 = Web3.to_checksum_address(PERMIT2_ADDRESS)
            for address, source in (
                (MULTICALL3_ADDRESS, MULTICALL3_SOURCE),
                (PERMIT2_ADDRESS, PERMIT2_SOURCE),
            ):
                if not bytes(self.w3.eth.get_code(Web3.to_checksum_address(address))):
                    self._set_code(Web3.to_checksum_address(address), _compiled(source)[0])
            self._set_code(escrow, _compiled(ESCROW_SOURCE)[0])
            self._install_collector(
                ERC3009_DEPOSIT_COLLECTOR_ADDRESS, ERC3009_COLLECTOR_SOURCE, escrow
            )
            self._install_collector(
                PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, PERMIT2_COLLECTOR_SOURCE, escrow, permit2
            )
            self.escrow_address = escrow
            return escrow

    def install_upto_proxy(self) -> ChecksumAddress:
        """Place x402's upto Permit2 proxy at the scheme's deterministic address, and Permit2's
        subset at its address when the chain has no code there, so that x402's stock `upto`
        client and facilitator work unchanged. Idempotent. Returns the proxy's address."""
        with self._lock:
            permit2 = Web3.to_checksum_address(PERMIT2_ADDRESS)
            if not bytes(self.w3.eth.get_code(permit2)):
                self._set_code(permit2, _compiled(PERMIT2_SOURCE)[0])
            proxy = Web3.to_checksum_address(X402_UPTO_PERMIT2_PROXY_ADDRESS)
            self._set_code(proxy, _compiled(UPTO_PROXY_SOURCE)[0])
            return proxy

    def _install_collector(self, address: str, source: Path, *bound_to: ChecksumAddress) -> None:
        """A deposit collector's code, then `initialize(escrow[, permit2])` once."""
        collector_address = Web3.to_checksum_address(address)
        runtime, abi = _compiled(source)
        self._set_code(collector_address, runtime)
        collector = self.w3.eth.contract(address=collector_address, abi=abi)
        serves = collector.functions.x402BatchSettlement().call()
        if int(serves, 16) == 0:
            data = collector.encode_abi("initialize", args=list(bound_to))
            self._send_setup_tx(collector_address, data)
        elif Web3.to_checksum_address(serves) != bound_to[0]:
            raise DevChainError(f"collector at {collector_address} serves {serves}")

    def _set_code(self, address: ChecksumAddress, runtime: bytes) -> None:
        if bytes(self.w3.eth.get_code(address)) != runtime:
            self.rpc("anvil_setCode", [address, "0x" + runtime.hex()])

    def escrow(self) -> Any:
        """The installed escrow as a web3 contract (the project's own ABI)."""
        if self.escrow_address is None:
            raise DevChainError("call install_batch_settlement() first")
        return self.w3.eth.contract(address=self.escrow_address, abi=escrow_abi())

    def _usdc(self) -> Any:
        if self.usdc_address is None:
            raise DevChainError("call install_usdc() first")
        return self.w3.eth.contract(address=self.usdc_address, abi=token_abi())

    def fund(self, address: str, usdc_atomic: int, eth_wei: int = 10**18) -> None:
        """Mint `usdc_atomic` dev USDC to `address` and add `eth_wei` to its ETH balance."""
        with self._lock:
            account = Web3.to_checksum_address(address)
            if eth_wei:
                self.set_eth_balance(account, self.eth_balance(account) + eth_wei)
            if usdc_atomic:
                usdc = self._usdc()
                data = usdc.encode_abi("mint", args=[account, usdc_atomic])
                self._send_setup_tx(usdc.address, data)

    def usdc_balance(self, address: str) -> int:
        return int(self._usdc().functions.balanceOf(Web3.to_checksum_address(address)).call())

    def authorization_used(self, address: str, nonce_hex: str) -> bool:
        """EIP-3009 `authorizationState(authorizer, nonce)`: has this nonce been used?"""
        nonce = bytes.fromhex(nonce_hex.removeprefix("0x"))
        if len(nonce) != 32:
            raise ValueError(f"nonce must be 32 bytes, got {len(nonce)}")
        usdc = self._usdc()
        return bool(
            usdc.functions.authorizationState(Web3.to_checksum_address(address), nonce).call()
        )


class _PortInUse(Exception):
    pass


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


__all__ = [
    "DEFAULT_CHAIN_ID",
    "DevChain",
    "DevChainError",
    "anvil_binary",
    "deposit_collector_abi",
    "escrow_abi",
    "permit2_abi",
    "permit2_deposit_collector_abi",
    "require_dev_extra",
    "token_abi",
    "usdc_defaults",
]
