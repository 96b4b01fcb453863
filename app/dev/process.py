"""anvil as a process: launched on a port (a free one unless asked), waited for until it answers
JSON-RPC with the chain id asked for, stopped; and the raw calls a running anvil takes (any
JSON-RPC method, ETH balances, code placed at an address, setup transactions from its unlocked
account) that the contracts and the token are installed with.

Everything here is synchronous (web3 HTTPProvider); async callers run it in a worker thread.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from eth_typing import ChecksumAddress, HexStr
from web3 import Web3
from web3.types import RPCEndpoint, TxParams

from app.dev.errors import DevChainError

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 30.0
RECEIPT_TIMEOUT_S = 30.0


class Anvil:
    """One anvil process for `chain_id` on HOST. Not locked: DevChain serialises its calls."""

    def __init__(
        self,
        chain_id: int,
        port: int | None = None,
        *,
        log_file: Path | None = None,
        startup_timeout: float = STARTUP_TIMEOUT_S,
    ) -> None:
        self.chain_id = chain_id
        self._requested_port = port
        self._log_file = log_file
        self._startup_timeout = startup_timeout
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._owns_log = False
        self._w3: Web3 | None = None
        self._setup_account: ChecksumAddress | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._proc is not None

    def start(self, binary: Path) -> None:
        """Launch `binary` on the requested port (or a free one, tried up to three times), then
        take anvil's unlocked account for setup transactions. After a failure, call stop()."""
        self._open_log()
        attempts = 1 if self._requested_port else 3
        for attempt in range(attempts):
            port = self._requested_port or _free_port()
            try:
                self._launch(binary, port)
                break
            except _PortInUse:
                if attempt == attempts - 1:
                    raise DevChainError(f"anvil: port {port} is already in use") from None
        accounts = self.w3.eth.accounts
        if not accounts:
            raise DevChainError("anvil exposes no unlocked account")
        self._setup_account = accounts[0]

    def stop(self) -> bool:
        """Terminate anvil (its state is gone) and remove its temporary log. Idempotent; says
        whether anvil was running."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _terminate(proc)
        if self._owns_log and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None
        self._w3 = None
        return proc is not None

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

    def set_code(self, address: ChecksumAddress, runtime: bytes) -> None:
        """Place `runtime` at `address` (anvil_setCode), unless it is already there."""
        if bytes(self.w3.eth.get_code(address)) != runtime:
            self.rpc("anvil_setCode", [address, "0x" + runtime.hex()])

    def send_setup_tx(self, to: ChecksumAddress, data: HexStr) -> None:
        """A transaction from anvil's unlocked account (never the relayer: no nonce race),
        waited for; raises DevChainError when it reverts."""
        if self._setup_account is None:
            raise DevChainError("DevChain is not started")
        tx: TxParams = {"from": self._setup_account, "to": to, "data": data}
        tx_hash = self.w3.eth.send_transaction(tx)
        receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT_S)
        if receipt["status"] != 1:
            raise DevChainError(f"setup transaction {tx_hash.hex()} to {to} reverted")


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
