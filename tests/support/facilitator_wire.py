"""A local x402 facilitator over HTTP (POST /verify, POST /settle, GET /supported), backed by
x402's own in-process facilitator on the dev chain: the remote-facilitator path, offline.
Every request body is recorded so tests can check what Engram sent, a test can check each
request's credentials (`authorize`, CDP's JWT), and a test can hold
/verify or /settle (`held(path)`) to catch a request in the middle of paying."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from x402 import x402FacilitatorSync
from x402.mechanisms.evm.exact import ExactEvmFacilitatorScheme, ExactEvmSchemeConfig
from x402.mechanisms.evm.signers import FacilitatorWeb3Signer
from x402.schemas import PaymentPayload, PaymentRequirements

from tests.support.wire import JsonHandler, LocalServer


class _Handler(JsonHandler):
    server: LocalFacilitatorServer

    def _refused(self, method: str) -> bool:
        """The server's `authorize` (when set) turns the request down: a 401."""
        check = self.server.authorize
        if check is None or check(method, self.path, dict(self.headers)):
            return False
        self._reply(401, {"error": "unauthorized"})
        return True

    def do_GET(self) -> None:
        if self._refused("GET"):
            return None
        if self.path != "/supported":
            return self._reply(404, {"error": "not found"})
        supported = self.server.facilitator.get_supported()
        self._reply(200, supported.model_dump(by_alias=True, exclude_none=True))

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self._refused("POST"):
            return None
        self.server.requests.append({"path": self.path, "body": body})
        if self.path in self.server.arrived:
            self.server.arrived[self.path].set()
            self.server.gates[self.path].wait(timeout=60)
        payload = PaymentPayload.model_validate(body["paymentPayload"])
        requirements = PaymentRequirements.model_validate(body["paymentRequirements"])
        if self.path == "/verify":
            result: Any = self.server.facilitator.verify(payload, requirements)
        elif self.path == "/settle":
            result = self.server.facilitator.settle(payload, requirements)
        else:
            return self._reply(404, {"error": "not found"})
        self._reply(200, result.model_dump(by_alias=True, exclude_none=True))


class LocalFacilitatorServer(LocalServer):
    def __init__(self, relayer_key: str, rpc_url: str, network: str) -> None:
        super().__init__(_Handler)
        signer = FacilitatorWeb3Signer(private_key=relayer_key, rpc_url=rpc_url)
        self.facilitator = x402FacilitatorSync()
        config = ExactEvmSchemeConfig(simulate_in_settle=True)
        self.facilitator.register([network], ExactEvmFacilitatorScheme(signer, config))
        self.requests: list[dict[str, Any]] = []
        # (method, path, headers) -> whether to serve it; None serves everything
        self.authorize: Callable[[str, str, dict[str, str]], bool] | None = None
        self.gates = {path: threading.Event() for path in ("/verify", "/settle")}
        self.arrived = {path: threading.Event() for path in self.gates}
        for gate in self.gates.values():
            gate.set()

    def held(self, path: str) -> threading.Event:
        """Hold requests to `path` until the returned event is set."""
        self.gates[path].clear()
        return self.gates[path]

    def wait_for(self, path: str, seconds: float = 30) -> bool:
        """Block until a request to `path` has arrived (a held one waits at the gate)."""
        return self.arrived[path].wait(seconds)
