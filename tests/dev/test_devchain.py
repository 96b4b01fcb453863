"""The local dev chain (anvil + dev USDC at the real Base USDC address) against x402's own code.

The payer side uses x402's reference client (`x402Client` + `ExactEvmClientScheme`) only to sign;
verification and settlement go through x402's in-process facilitator (`x402Facilitator` +
`ExactEvmFacilitatorScheme` + `FacilitatorWeb3Signer`) on a real local chain. Offline: anvil
comes from the project's node_modules (npm package @foundry-rs/anvil), the token is compiled
with the vyper package.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.exceptions import ContractLogicError
from x402 import x402Client, x402Facilitator
from x402.mechanisms.evm.constants import TRANSFER_WITH_AUTHORIZATION_BYTES_ABI
from x402.mechanisms.evm.exact import (
    ExactEvmClientScheme,
    ExactEvmFacilitatorScheme,
    ExactEvmSchemeConfig,
)
from x402.mechanisms.evm.signers import EthAccountSigner, FacilitatorWeb3Signer
from x402.schemas import PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo

from app.dev.chain import DevChain
from app.dev.errors import DevChainError
from app.dev.npm import anvil_binary
from app.dev.usdc import token_abi, usdc_defaults
from tests.support.x402 import TRANSFER_TYPES

BASE = 8453
BASE_SEPOLIA = 84532
PRICE = 5000  # $0.005 in USDC atomic units
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


@pytest.fixture(scope="module")
def facilitator(chain: DevChain) -> x402Facilitator:
    signer = FacilitatorWeb3Signer(private_key=chain.relayer.key.hex(), rpc_url=chain.rpc_url)
    facilitator = x402Facilitator()
    facilitator.register([chain.network], ExactEvmFacilitatorScheme(signer))
    return facilitator


def requirements_for(chain: DevChain, pay_to: str, amount: int = PRICE) -> PaymentRequirements:
    """What a server would offer: the stock x402 USDC defaults for the chain, unchanged."""
    address, name, version = usdc_defaults(chain.chain_id)
    return PaymentRequirements(
        scheme="exact",
        network=chain.network,
        asset=address,
        amount=str(amount),
        pay_to=pay_to,
        max_timeout_seconds=300,
        extra={"name": name, "version": version},
    )


async def pay(payer: LocalAccount, requirements: PaymentRequirements) -> PaymentPayload:
    client = x402Client()
    client.register(requirements.network, ExactEvmClientScheme(EthAccountSigner(payer)))
    payment_required = PaymentRequired(
        accepts=[requirements], resource=ResourceInfo(url="http://engram.test/v1/recall")
    )
    payload = await client.create_payment_payload(payment_required)
    assert isinstance(payload, PaymentPayload)
    return payload


def funded_payer(chain: DevChain, usdc: int = 1_000_000) -> LocalAccount:
    payer: LocalAccount = Account.create()
    chain.fund(payer.address, usdc, eth_wei=0)  # gasless for the payer: the relayer pays
    return payer


def typed_authorization(
    chain: DevChain,
    payer: str,
    to: str,
    *,
    value: int = PRICE,
    valid_after: int = 0,
    valid_before: int | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    address, default_name, version = usdc_defaults(chain.chain_id)
    return {
        "types": {
            "EIP712Domain": [
                {"name": "name", "type": "string"},
                {"name": "version", "type": "string"},
                {"name": "chainId", "type": "uint256"},
                {"name": "verifyingContract", "type": "address"},
            ],
            "TransferWithAuthorization": TRANSFER_TYPES["TransferWithAuthorization"],
        },
        "primaryType": "TransferWithAuthorization",
        "domain": {
            "name": name or default_name,
            "version": version,
            "chainId": chain.chain_id,
            "verifyingContract": address,
        },
        "message": {
            "from": payer,
            "to": to,
            "value": value,
            "validAfter": valid_after,
            "validBefore": valid_before if valid_before is not None else int(time.time()) + 600,
            "nonce": "0x" + secrets.token_hex(32),
        },
    }


def simulate(chain: DevChain, data: str) -> None:
    """eth_call against the token; raises ContractLogicError with the revert reason."""
    assert chain.usdc_address is not None
    chain.w3.eth.call({"from": chain.relayer.address, "to": chain.usdc_address, "data": data})


def _authorization_args(typed: dict[str, Any]) -> list[Any]:
    m = typed["message"]
    nonce = bytes.fromhex(m["nonce"][2:])
    return [m["from"], m["to"], m["value"], m["validAfter"], m["validBefore"], nonce]


def bytes_overload_call(chain: DevChain, typed: dict[str, Any], signature: bytes) -> str:
    assert chain.usdc_address is not None
    token = chain.w3.eth.contract(
        address=chain.usdc_address, abi=TRANSFER_WITH_AUTHORIZATION_BYTES_ABI
    )
    return token.encode_abi(
        "transferWithAuthorization", args=[*_authorization_args(typed), signature]
    )


def vrs_overload_call(chain: DevChain, typed: dict[str, Any], v: int, r: int, s: int) -> str:
    assert chain.usdc_address is not None
    token = chain.w3.eth.contract(address=chain.usdc_address, abi=token_abi())
    return token.encode_abi(
        "transferWithAuthorization",
        args=[*_authorization_args(typed), v, r.to_bytes(32, "big"), s.to_bytes(32, "big")],
    )


def expect_revert(chain: DevChain, data: str, reason: str) -> None:
    with pytest.raises(ContractLogicError) as info:
        simulate(chain, data)
    assert reason in str(info.value)


# ---------------------------------------------------------------------------------------------


async def test_x402_reference_client_verify_and_settle(
    chain: DevChain, facilitator: x402Facilitator
) -> None:
    payer = funded_payer(chain)
    pay_to = Account.create().address
    requirements = requirements_for(chain, pay_to)
    payload = await pay(payer, requirements)

    verified = await facilitator.verify(payload, requirements)
    assert verified.is_valid, verified
    assert verified.payer == payer.address

    settled = await facilitator.settle(payload, requirements)
    assert settled.success, settled
    assert settled.transaction.startswith("0x") and len(settled.transaction) == 66
    assert settled.network == chain.network
    receipt = chain.w3.eth.get_transaction_receipt(settled.transaction)
    assert receipt["status"] == 1
    assert receipt["from"] == chain.relayer.address  # the relayer paid the gas

    assert chain.usdc_balance(pay_to) == PRICE
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE
    assert chain.eth_balance(payer.address) == 0
    nonce = payload.payload["authorization"]["nonce"]
    assert chain.authorization_used(payer.address, nonce)

    # The same authorization cannot be used twice.
    again = await facilitator.verify(payload, requirements)
    assert not again.is_valid
    assert again.invalid_reason == "invalid_exact_evm_nonce_already_used", again
    # x402 quirk: settle re-verifies WITHOUT simulating by default, so a replay is broadcast and
    # reverts on chain (the relayer pays the gas) ...
    resettled = await facilitator.settle(payload, requirements)
    assert not resettled.success, resettled
    assert resettled.error_reason == "transaction_failed", resettled
    assert chain.w3.eth.get_transaction_receipt(resettled.transaction)["status"] == 0
    # ... unless the scheme is configured with simulate_in_settle=True: then nothing is sent.
    simulating = x402Facilitator()
    simulating.register(
        [chain.network],
        ExactEvmFacilitatorScheme(
            FacilitatorWeb3Signer(private_key=chain.relayer.key.hex(), rpc_url=chain.rpc_url),
            ExactEvmSchemeConfig(simulate_in_settle=True),
        ),
    )
    relayer_nonce = chain.w3.eth.get_transaction_count(chain.relayer.address)
    refused = await simulating.settle(payload, requirements)
    assert not refused.success
    assert refused.error_reason == "invalid_exact_evm_nonce_already_used", refused
    assert refused.transaction == ""
    assert chain.w3.eth.get_transaction_count(chain.relayer.address) == relayer_nonce
    assert chain.usdc_balance(pay_to) == PRICE
    assert chain.usdc_balance(payer.address) == 1_000_000 - PRICE


async def test_wrong_domain_name_is_rejected_on_chain(
    chain: DevChain, facilitator: x402Facilitator
) -> None:
    # Base Sepolia's name on Base: the signature is self-consistent off chain, so it is the
    # token's own EIP-712 domain that rejects it in the simulated transfer.
    payer = funded_payer(chain)
    requirements = requirements_for(chain, Account.create().address)
    wrong = requirements.model_copy(update={"extra": {"name": "USDC", "version": "2"}})
    payload = await pay(payer, wrong)
    verified = await facilitator.verify(payload, wrong)
    assert not verified.is_valid
    assert verified.invalid_reason == "invalid_exact_evm_payload_signature", verified


async def test_insufficient_balance(chain: DevChain, facilitator: x402Facilitator) -> None:
    payer = funded_payer(chain, usdc=PRICE - 1)
    requirements = requirements_for(chain, Account.create().address)
    payload = await pay(payer, requirements)
    verified = await facilitator.verify(payload, requirements)
    assert not verified.is_valid
    assert verified.invalid_reason == "invalid_exact_evm_insufficient_balance", verified


def test_token_basics(chain: DevChain) -> None:
    address, name, version = usdc_defaults(BASE)
    assert chain.usdc_address == address == "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
    token = chain.w3.eth.contract(address=address, abi=token_abi())
    assert token.functions.name().call() == name == "USD Coin"
    assert token.functions.version().call() == version == "2"
    assert token.functions.decimals().call() == 6
    assert token.functions.symbol().call() == "USDC"
    domain = typed_authorization(chain, address, address)
    expected = encode_typed_data(full_message=domain).header
    assert token.functions.DOMAIN_SEPARATOR().call() == expected
    fields, d_name, d_version, d_chain, d_contract, _, _ = token.functions.eip712Domain().call()
    assert (fields, d_name, d_version, d_chain, d_contract) == (b"\x0f", name, "2", BASE, address)
    # install_usdc is idempotent; the token cannot be re-initialised.
    assert chain.install_usdc() == address
    with pytest.raises(ContractLogicError, match="already initialized"):
        token.functions.initialize("x", "y").call()

    alice, bob = Account.create(), Account.create()
    supply = token.functions.totalSupply().call()
    chain.fund(alice.address, 700, eth_wei=10**18)
    assert token.functions.totalSupply().call() == supply + 700
    tx = token.functions.transfer(bob.address, 200).build_transaction(
        {
            "from": alice.address,
            "nonce": 0,
            "gas": 100_000,
            "gasPrice": chain.w3.eth.gas_price,
            "chainId": BASE,
        }
    )
    tx_hash = chain.w3.eth.send_raw_transaction(alice.sign_transaction(tx).raw_transaction)
    receipt = chain.w3.eth.wait_for_transaction_receipt(tx_hash)
    assert receipt["status"] == 1
    (event,) = token.events.Transfer().process_receipt(receipt)
    assert (event.args.sender, event.args.receiver, event.args.value) == (
        alice.address,
        bob.address,
        200,
    )
    assert chain.usdc_balance(alice.address) == 500
    assert chain.usdc_balance(bob.address) == 200
    with pytest.raises(ContractLogicError, match="transfer amount exceeds balance"):
        token.functions.transfer(alice.address, 201).call({"from": bob.address})


def test_eip3009_rules_on_both_overloads(chain: DevChain) -> None:
    payer = funded_payer(chain)
    to = Account.create().address
    typed = typed_authorization(chain, payer.address, to)
    signed = Account.sign_typed_data(payer.key, full_message=typed)
    v, r, s = signed.v, signed.r, signed.s
    sig = r.to_bytes(32, "big") + s.to_bytes(32, "big") + bytes([v])

    simulate(chain, vrs_overload_call(chain, typed, v, r, s))  # valid: does not revert
    simulate(chain, bytes_overload_call(chain, typed, sig))

    bad_sig = "FiatTokenV2: invalid signature"
    # Malleable twin (s in the upper half, flipped v) recovers the same address: rejected.
    high_s, flipped_v = SECP256K1_N - s, 55 - v
    expect_revert(chain, vrs_overload_call(chain, typed, flipped_v, r, high_s), bad_sig)
    twin = r.to_bytes(32, "big") + high_s.to_bytes(32, "big") + bytes([flipped_v])
    expect_revert(chain, bytes_overload_call(chain, typed, twin), bad_sig)
    # v must be 27 or 28 (0/1 are not accepted on chain).
    expect_revert(chain, vrs_overload_call(chain, typed, v - 27, r, s), bad_sig)
    expect_revert(chain, bytes_overload_call(chain, typed, sig[:64] + bytes([v - 27])), bad_sig)
    # A signature over other values, or by someone else.
    other = dict(typed, message=dict(typed["message"], value=PRICE + 1))
    expect_revert(chain, bytes_overload_call(chain, other, sig), bad_sig)
    stranger = Account.sign_typed_data(Account.create().key, full_message=typed).signature
    expect_revert(chain, bytes_overload_call(chain, typed, bytes(stranger)), bad_sig)
    expect_revert(chain, bytes_overload_call(chain, typed, sig[:64]), bad_sig)

    # Validity window: validAfter < block.timestamp < validBefore.
    now = chain.w3.eth.get_block("latest")["timestamp"]
    for window, reason in (
        ({"valid_after": now + 3600}, "authorization is not yet valid"),
        ({"valid_before": now - 1}, "authorization is expired"),
    ):
        timed = typed_authorization(chain, payer.address, to, **window)
        timed_sig = Account.sign_typed_data(payer.key, full_message=timed).signature
        expect_revert(chain, bytes_overload_call(chain, timed, bytes(timed_sig)), reason)

    # Unknown selectors and malformed calldata revert instead of falling through.
    expect_revert(chain, "0xdeadbeef", "unknown function")
    expect_revert(chain, bytes_overload_call(chain, typed, sig)[:100], "execution reverted")


# A minimal EIP-1271 wallet: it approves exactly the digests it was asked about, by a
# "signature" of b"approve:" + digest (43 bytes, so x402 routes it to the bytes overload).
WALLET_SOURCE = """
# pragma version ~=0.4.3
@view
@external
def isValidSignature(digest: bytes32, signature: Bytes[128]) -> bytes4:
    if signature == concat(b"approve:", digest):
        return 0x1626ba7e
    return 0xffffffff
"""


async def test_smart_wallet_signature_settles_through_bytes_overload(
    chain: DevChain, facilitator: x402Facilitator
) -> None:
    import vyper  # type: ignore[import-untyped]

    wallet_code = vyper.compile_code(WALLET_SOURCE, output_formats=["bytecode_runtime"])
    wallet = Account.create().address
    chain.rpc("anvil_setCode", [wallet, wallet_code["bytecode_runtime"]])
    chain.fund(wallet, 20_000, eth_wei=0)
    pay_to = Account.create().address
    requirements = requirements_for(chain, pay_to)

    typed = typed_authorization(chain, wallet, pay_to)
    signable = encode_typed_data(full_message=typed)
    digest = Web3.keccak(b"\x19" + signable.version + signable.header + signable.body)
    m = typed["message"]
    payload = PaymentPayload(
        x402_version=2,
        accepted=requirements,
        payload={
            "signature": "0x" + (b"approve:" + digest).hex(),
            "authorization": {
                "from": wallet,
                "to": pay_to,
                "value": str(m["value"]),
                "validAfter": str(m["validAfter"]),
                "validBefore": str(m["validBefore"]),
                "nonce": m["nonce"],
            },
        },
    )
    verified = await facilitator.verify(payload, requirements)
    assert verified.is_valid, verified
    settled = await facilitator.settle(payload, requirements)
    assert settled.success, settled
    assert chain.usdc_balance(pay_to) == PRICE
    assert chain.usdc_balance(wallet) == 20_000 - PRICE
    assert chain.authorization_used(wallet, m["nonce"])

    # The wallet refuses a digest it did not approve.
    forged = PaymentPayload.model_validate(
        payload.model_dump(by_alias=True)
        | {
            "payload": payload.payload
            | {"signature": "0x" + (b"approve:" + bytes(32)).hex()}
            | {"authorization": payload.payload["authorization"] | {"nonce": "0x" + "11" * 32}}
        }
    )
    assert not (await facilitator.verify(forged, requirements)).is_valid


def test_base_sepolia_domain() -> None:
    with DevChain(chain_id=BASE_SEPOLIA) as sepolia:
        address = sepolia.install_usdc()
        assert address == "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
        token = sepolia.w3.eth.contract(address=address, abi=token_abi())
        assert token.functions.name().call() == "USDC"
        assert token.functions.version().call() == "2"
        typed = typed_authorization(sepolia, address, address)
        assert typed["domain"]["name"] == "USDC"
        expected = encode_typed_data(full_message=typed).header
        assert token.functions.DOMAIN_SEPARATOR().call() == expected
        rpc_url = sepolia.rpc_url
    assert not sepolia.running
    with pytest.raises(Exception):  # noqa: B017 - any connection error: the chain is gone
        _ = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 2})).eth.chain_id


def test_missing_npm_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "package.json").write_text('{"private": true}')
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    with pytest.raises(DevChainError, match="`npm` is not on PATH"):
        anvil_binary(tmp_path)
