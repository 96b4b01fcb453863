"""The dev chain's x402 upto Permit2 proxy (app/dev/contracts/upto_permit2_proxy.vy), placed at
the scheme's deterministic address by `DevChain.install_upto_proxy()`.

x402's stock `upto` client signs a Permit2 witness transfer for a maximum; x402's stock
facilitator verifies it for that maximum and settles the call's real cost through the proxy.
Then every revert the proxy names, each from a call that differs from a good one in one thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3.contract.contract import Contract
from x402 import x402ClientSync, x402FacilitatorSync
from x402.mechanisms.evm.constants import (
    ERR_UPTO_SETTLEMENT_EXCEEDS_AMOUNT,
    PERMIT2_ADDRESS,
    X402_UPTO_PERMIT2_PROXY_ABI,
    X402_UPTO_PERMIT2_PROXY_ADDRESS,
)
from x402.mechanisms.evm.signers import EthAccountSigner, FacilitatorWeb3Signer
from x402.mechanisms.evm.types import UptoPermit2Payload
from x402.mechanisms.evm.upto import UptoEvmClientScheme, UptoEvmFacilitatorScheme
from x402.schemas import PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo

from app.dev.chain import DevChain
from app.dev.install import UPTO_PROXY_SOURCE, upto_proxy_abi
from app.dev.usdc import token_abi, usdc_defaults
from tests.support.chain_calls import account_with_gas, assert_reverts, transact

MAXIMUM = 50_000  # what the payer signs for: 0.05 USDC
COST = 12_345  # what the call really cost

PROXY_ERRORS = {
    "AmountExceedsPermitted()",
    "UnauthorizedFacilitator()",
    "InvalidAmount()",
    "InvalidOwner()",
    "InvalidDestination()",
    "PaymentTooEarly()",
}


@pytest.fixture(scope="module")
def dev(chain: DevChain) -> DevChain:
    chain.install_upto_proxy()
    return chain


@pytest.fixture(scope="module")
def proxy(dev: DevChain) -> Contract:
    return dev.w3.eth.contract(address=X402_UPTO_PERMIT2_PROXY_ADDRESS, abi=upto_proxy_abi())


def requirements(dev: DevChain, receiver: str, amount: int = MAXIMUM) -> PaymentRequirements:
    """What an `upto` offer says (the facilitator's `get_extra` names the relayer)."""
    assert dev.usdc_address is not None
    _, name, version = usdc_defaults(dev.chain_id)
    return PaymentRequirements(
        scheme="upto",
        network=dev.network,
        asset=dev.usdc_address,
        amount=str(amount),
        pay_to=receiver,
        max_timeout_seconds=300,
        extra={"facilitatorAddress": dev.relayer.address, "name": name, "version": version},
    )


def approved_payer(dev: DevChain, usdc: int = 1_000_000) -> LocalAccount:
    """A payer who approved Permit2 once, as every Permit2 payer does."""
    payer = account_with_gas(dev, usdc=usdc)
    token = dev.w3.eth.contract(address=dev.usdc_address, abi=token_abi())
    transact(dev, payer, token.functions.approve(PERMIT2_ADDRESS, 2**256 - 1))
    return payer


def signed_payload(
    dev: DevChain, payer: LocalAccount, offer: PaymentRequirements
) -> PaymentPayload:
    client = x402ClientSync().register(dev.network, UptoEvmClientScheme(EthAccountSigner(payer)))
    payload = client.create_payment_payload(
        PaymentRequired(
            accepts=[offer], resource=ResourceInfo(url="http://engram.test/v1/store/batch")
        )
    )
    assert isinstance(payload, PaymentPayload)
    return payload


def test_the_proxy_has_everything_x402_calls(proxy: Contract) -> None:
    """x402's facilitator encodes `settle` with its own ABI: the dev proxy declares the same."""
    ours = {f["name"]: f for f in upto_proxy_abi() if f["type"] == "function"}
    for entry in X402_UPTO_PERMIT2_PROXY_ABI:
        theirs = [i["type"] for i in entry["inputs"]]
        assert [i["type"] for i in ours[entry["name"]]["inputs"]] == theirs
    assert proxy.functions.PERMIT2_ADDRESS().call() == PERMIT2_ADDRESS


def test_stock_client_and_facilitator_settle_the_real_cost(dev: DevChain) -> None:
    """The payer signs for the maximum; the facilitator verifies the maximum and settles only
    what the call cost, once: the same permit cannot be settled again."""
    payer = approved_payer(dev)
    receiver: LocalAccount = Account.create()
    offer = requirements(dev, receiver.address)
    payload = signed_payload(dev, payer, offer)
    facilitator = x402FacilitatorSync().register(
        [dev.network],
        UptoEvmFacilitatorScheme(
            FacilitatorWeb3Signer(private_key=dev.relayer.key.hex(), rpc_url=dev.rpc_url)
        ),
    )
    verified = facilitator.verify(payload, offer)
    assert verified.is_valid, verified

    too_much = facilitator.settle(payload, requirements(dev, receiver.address, MAXIMUM + 1))
    assert not too_much.success
    assert too_much.error_reason == ERR_UPTO_SETTLEMENT_EXCEEDS_AMOUNT

    settled = facilitator.settle(payload, requirements(dev, receiver.address, COST))
    assert settled.success, settled
    assert dev.usdc_balance(receiver.address) == COST
    assert dev.usdc_balance(payer.address) == 1_000_000 - COST

    again = facilitator.settle(payload, requirements(dev, receiver.address, COST))
    assert not again.success  # Permit2 spent the nonce: a permit pays once
    assert dev.usdc_balance(receiver.address) == COST


@dataclass(frozen=True)
class Settle:
    """`settle`'s arguments, good by default; each refusal changes one of them."""

    permit: PaymentPayload
    amount: int = COST
    owner: str | None = None
    to: str | None = None
    facilitator: str | None = None
    valid_after: int = 0

    def args(self) -> tuple[Any, ...]:
        auth = UptoPermit2Payload.from_dict(self.permit.payload).permit2_authorization
        signature = UptoPermit2Payload.from_dict(self.permit.payload).signature
        witness = auth.witness
        return (
            (
                (auth.permitted.token, int(auth.permitted.amount)),
                int(auth.nonce),
                int(auth.deadline),
            ),
            self.amount,
            auth.from_address if self.owner is None else self.owner,
            (
                witness.to if self.to is None else self.to,
                witness.facilitator if self.facilitator is None else self.facilitator,
                self.valid_after,
            ),
            bytes.fromhex(signature.removeprefix("0x")),
        )


# Each named revert, from a call that differs from a good one in one argument.
REVERTS: list[tuple[str, dict[str, Any]]] = [
    ("AmountExceedsPermitted()", {"amount": MAXIMUM + 1}),
    ("UnauthorizedFacilitator()", {"facilitator": "0x" + "42" * 20}),
    ("InvalidAmount()", {"amount": 0}),
    ("InvalidOwner()", {"owner": "0x" + "00" * 20}),
    ("InvalidDestination()", {"to": "0x" + "00" * 20}),
    ("PaymentTooEarly()", {"valid_after": 2**40}),
]


@pytest.mark.parametrize(("error", "change"), REVERTS)
def test_named_revert(dev: DevChain, proxy: Contract, error: str, change: dict[str, Any]) -> None:
    payer = approved_payer(dev)
    payload = signed_payload(dev, payer, requirements(dev, Account.create().address))
    bad = Settle(payload, **change)
    assert_reverts(proxy.functions.settle(*bad.args()), dev.relayer.address, error)
    # the good call from the same facilitator goes through: the one change refused it
    proxy.functions.settle(*Settle(payload).args()).call({"from": dev.relayer.address})


def test_every_named_revert_is_declared_and_tested() -> None:
    """The errors the contract raises are the scheme's names, and each has a case above."""
    source = UPTO_PROXY_SOURCE.read_text()
    declared = set(re.findall(r'method_id\("(\w+\(\))"\)', source))
    assert declared == PROXY_ERRORS
    assert {error for error, _ in REVERTS} == PROXY_ERRORS


def test_a_forged_witness_is_refused_by_permit2(dev: DevChain, proxy: Contract) -> None:
    """Paying someone else than the signed receiver changes the witness hash: Permit2 recovers
    another signer."""
    payer = approved_payer(dev)
    payload = signed_payload(dev, payer, requirements(dev, Account.create().address))
    stolen = Settle(payload, to=dev.relayer.address)
    assert_reverts(proxy.functions.settle(*stolen.args()), dev.relayer.address, "InvalidSigner()")
