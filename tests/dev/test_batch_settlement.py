"""The dev chain's batch-settlement escrow and ERC-3009 deposit collector (app/dev/contracts/),
on a real anvil chain, against the `x402` package's own interface for the scheme.

Everything x402 sends is built with x402's own helpers (channel ids, vouchers, claim batches,
refund signatures, collector data, contract argument tuples) and sent through x402's ABI, so
a passing test is also a compatibility check. The last test runs x402's stock client and
facilitator schemes end to end. One chain per module; the timed-withdrawal tests rewind it.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount
from eth_utils import keccak, to_checksum_address
from web3.contract.contract import Contract, ContractFunction
from web3.exceptions import ContractLogicError
from web3.logs import DISCARD
from web3.types import TxReceipt
from x402 import x402ClientSync, x402FacilitatorSync
from x402.mechanisms.evm.batch_settlement.abi import BATCH_SETTLEMENT_ABI
from x402.mechanisms.evm.batch_settlement.authorizer_signer import (
    LocalAuthorizerSigner,
    sign_claim_batch,
    sign_refund,
)
from x402.mechanisms.evm.batch_settlement.client import (
    BatchSettlementDepositPolicy,
    BatchSettlementEvmScheme,
)
from x402.mechanisms.evm.batch_settlement.client.voucher import sign_voucher
from x402.mechanisms.evm.batch_settlement.constants import (
    BATCH_PERMIT2_WITNESS_TYPES,
    BATCH_SETTLEMENT_ADDRESS,
    CLAIM_BATCH_TYPES,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    MAX_WITHDRAW_DELAY,
    MIN_WITHDRAW_DELAY,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
    RECEIVE_AUTHORIZATION_TYPES,
    REFUND_TYPES,
    VOUCHER_TYPES,
)
from x402.mechanisms.evm.batch_settlement.encoding import (
    build_eip2612_permit_data,
    build_erc3009_collector_data,
    build_erc3009_deposit_nonce,
    build_permit2_collector_data,
)
from x402.mechanisms.evm.batch_settlement.facilitator import BatchSettlementEvmFacilitator
from x402.mechanisms.evm.batch_settlement.facilitator.claim import build_voucher_claim_args
from x402.mechanisms.evm.batch_settlement.facilitator.utils import to_contract_channel_config
from x402.mechanisms.evm.batch_settlement.types import (
    ChannelConfig,
    ClaimPayload,
    EnrichedRefundPayload,
    SettlePayload,
    VoucherClaim,
    VoucherFields,
)
from x402.mechanisms.evm.batch_settlement.utils import (
    compute_channel_id,
    get_batch_settlement_eip712_domain,
)
from x402.mechanisms.evm.constants import PERMIT2_ADDRESS
from x402.mechanisms.evm.signers import EthAccountSigner, FacilitatorWeb3Signer
from x402.schemas import (
    PaymentPayload,
    PaymentRequired,
    PaymentRequirements,
    PaymentResponseContext,
    ResourceInfo,
    SettleResponse,
)

from app.dev.chain import DevChain
from app.dev.install import (
    ERC3009_COLLECTOR_SOURCE,
    ESCROW_SOURCE,
    PERMIT2_COLLECTOR_SOURCE,
    deposit_collector_abi,
    escrow_abi,
    permit2_abi,
    permit2_deposit_collector_abi,
)
from app.dev.usdc import token_abi, usdc_defaults
from tests.support.chain_calls import (
    account_with_gas,
    assert_reverts,
    transact,
)

PRICE = 1_000  # $0.001 in USDC atomic units
DEPOSIT = 10_000
ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"
UINT128_MAX = 2**128 - 1
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141

# The scheme's published events, as their signatures (the topic a log carries).
SCHEME_EVENTS = {
    "ChannelCreated(bytes32,(address,address,address,address,address,uint40,bytes32))",
    "ChannelClosed(bytes32,(address,address,address,address,address,uint40,bytes32))",
    "Deposited(bytes32,address,uint128,uint128)",
    "Claimed(bytes32,address,uint128,uint128)",
    "Settled(address,address,address,uint128)",
    "Refunded(bytes32,address,uint128)",
    "WithdrawInitiated(bytes32,uint128,uint40)",
    "WithdrawFinalized(bytes32,address,uint128)",
}

# The reverts the scheme names: the escrow's errors, then the deposit collector's.
SCHEME_ERRORS = {
    "InvalidChannel()",
    "ZeroDeposit()",
    "DepositOverflow()",
    "InvalidSignature()",
    "NotReceiverAuthorizer()",
    "NotAuthorizedToClaim()",
    "NotAuthorizedToRefund()",
    "ClaimExceedsCeiling()",
    "ClaimExceedsBalance()",
    "WithdrawalAlreadyPending()",
    "WithdrawalNotPending()",
    "NotAuthorizedToFinalizeWithdraw()",
    "WithdrawDelayNotElapsed()",
    "NothingToWithdraw()",
    "WithdrawAmountExceedsAvailable()",
    "WithdrawDelayOutOfRange()",
    "EmptyBatch()",
    "DepositCollectionFailed()",
    "InvalidCollector()",
    "InvalidRefundNonce()",
    "ZeroRefund()",
    "OnlyX402BatchSettlement()",
    "InvalidX402BatchSettlementAddress()",
    "InvalidPermit2Address()",
    "Permit2612AmountMismatch()",
}
# Declared but out of reach on the dev chain: the dev USDC never answers `false` to a transfer,
# and a token without code fails earlier (the escrow reads its balance before any transfer).
UNREACHABLE_ERRORS = {"SafeERC20FailedOperation(address)"}


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Parties:
    receiver: LocalAccount
    authorizer: LocalAccount  # the receiver authorizer: signs claim batches and refunds
    stranger: LocalAccount


@dataclass(frozen=True)
class Channel:
    config: ChannelConfig
    id: str
    payer: LocalAccount

    @property
    def args(self) -> tuple[Any, ...]:
        return to_contract_channel_config(self.config)


@pytest.fixture(scope="module")
def dev(chain: DevChain) -> DevChain:
    """The module's chain (dev USDC installed by conftest) with the escrow installed."""
    assert chain.install_batch_settlement() == BATCH_SETTLEMENT_ADDRESS
    return chain


@pytest.fixture(scope="module")
def escrow(dev: DevChain) -> Contract:
    """The escrow through x402's own ABI: what the scheme's client and facilitator call."""
    return dev.w3.eth.contract(address=BATCH_SETTLEMENT_ADDRESS, abi=BATCH_SETTLEMENT_ABI)


@pytest.fixture(scope="module")
def events(dev: DevChain) -> Contract:
    """The escrow through the project's ABI, to decode its logs."""
    return dev.w3.eth.contract(address=BATCH_SETTLEMENT_ADDRESS, abi=escrow_abi())


@pytest.fixture(scope="module")
def parties(dev: DevChain) -> Parties:
    return Parties(
        receiver=account_with_gas(dev),
        authorizer=account_with_gas(dev),
        stranger=account_with_gas(dev),
    )


@pytest.fixture
def rewind(dev: DevChain) -> Iterator[None]:
    """Undo a test's time travel (and its state) so later tests sign against wall-clock time."""
    snapshot = dev.rpc("evm_snapshot", [])
    yield
    assert dev.rpc("evm_revert", [snapshot])


def token(dev: DevChain) -> str:
    assert dev.usdc_address is not None
    return dev.usdc_address


def new_config(
    dev: DevChain,
    payer: LocalAccount,
    parties: Parties,
    *,
    payer_authorizer: str | None = None,
    receiver_authorizer: str | None = None,
    delay: int = MIN_WITHDRAW_DELAY,
) -> ChannelConfig:
    """A channel config as x402's client builds one (the payer is its own authorizer unless
    told otherwise), with a fresh salt so every test has its own channel."""
    return ChannelConfig(
        payer=payer.address,
        payer_authorizer=payer.address if payer_authorizer is None else payer_authorizer,
        receiver=parties.receiver.address,
        receiver_authorizer=receiver_authorizer or parties.authorizer.address,
        token=token(dev),
        withdraw_delay=delay,
        salt="0x" + secrets.token_hex(32),
    )


def deposit_call(
    dev: DevChain,
    escrow: Contract,
    payer: LocalAccount,
    config: ChannelConfig,
    amount: int,
    *,
    valid_before: int | None = None,
) -> ContractFunction:
    """`deposit` through the ERC-3009 collector with the payer's real ReceiveWithAuthorization
    signature, its nonce bound to the channel as x402's client binds it."""
    channel_id = compute_channel_id(config, dev.network)
    salt = "0x" + secrets.token_hex(32)
    _, name, version = usdc_defaults(dev.chain_id)
    before = int(time.time()) + 600 if valid_before is None else valid_before
    domain = {"name": name, "version": version, "chainId": dev.chain_id}
    signature = EthAccountSigner(payer).sign_typed_data(
        {**domain, "verifyingContract": token(dev)},
        RECEIVE_AUTHORIZATION_TYPES,
        "ReceiveWithAuthorization",
        {
            "from": payer.address,
            "to": ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
            "value": amount,
            "validAfter": 0,
            "validBefore": before,
            "nonce": bytes.fromhex(build_erc3009_deposit_nonce(channel_id, salt)[2:]),
        },
    )
    data = build_erc3009_collector_data("0", str(before), salt, "0x" + signature.hex())
    return escrow.functions.deposit(
        to_contract_channel_config(config), amount, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, data
    )


def open_channel(
    dev: DevChain,
    escrow: Contract,
    parties: Parties,
    *,
    amount: int = DEPOSIT,
    payer_authorizer: str | None = None,
    payer_gas: bool = True,
) -> Channel:
    """A channel funded with `amount` through the collector; the relayer submits it."""
    payer = Account.create()
    dev.fund(payer.address, amount * 10, eth_wei=10**18 if payer_gas else 0)
    config = new_config(dev, payer, parties, payer_authorizer=payer_authorizer)
    transact(dev, dev.relayer, deposit_call(dev, escrow, payer, config, amount))
    return Channel(config, compute_channel_id(config, dev.network), payer)


def voucher(dev: DevChain, channel: Channel, max_claimable: int, *, signer: Any = None) -> str:
    """A cumulative voucher signed by x402's client code (by the payer unless told)."""
    fields = sign_voucher(
        EthAccountSigner(signer or channel.payer), channel.id, max_claimable, dev.network
    )
    return fields.signature


def claim_row(
    channel: Channel, max_claimable: int, signature: str, total: int | None = None
) -> VoucherClaim:
    return VoucherClaim(
        channel=channel.config,
        max_claimable_amount=str(max_claimable),
        signature=signature,
        total_claimed=str(max_claimable if total is None else total),
    )


def claim_args(rows: list[VoucherClaim]) -> list[tuple[Any, ...]]:
    return build_voucher_claim_args(rows)


def batch_signature(dev: DevChain, signer: LocalAccount, rows: list[VoucherClaim]) -> bytes:
    return bytes.fromhex(sign_claim_batch(LocalAuthorizerSigner(signer), rows, dev.network)[2:])


def refund_signature(
    dev: DevChain, signer: LocalAccount, channel: Channel, amount: int, nonce: int
) -> bytes:
    signature = sign_refund(LocalAuthorizerSigner(signer), channel.id, amount, nonce, dev.network)
    return bytes.fromhex(signature[2:])


def logged(events: Contract, receipt: TxReceipt, name: str) -> list[dict[str, Any]]:
    event = getattr(events.events, name)()
    return [dict(log["args"]) for log in event.process_receipt(receipt, errors=DISCARD)]


def channel_state(escrow: Contract, channel: Channel) -> tuple[int, int]:
    balance, total_claimed = escrow.functions.channels(channel.id).call()
    return int(balance), int(total_claimed)


def time_travel(dev: DevChain, seconds: int) -> None:
    dev.rpc("evm_increaseTime", [seconds])
    dev.rpc("evm_mine", [])


# ---------------------------------------------------------------------------------------------
# The contract's interface is the scheme's
# ---------------------------------------------------------------------------------------------


def _signature(entry: dict[str, Any]) -> str:
    def canonical(item: dict[str, Any]) -> str:
        kind = str(item["type"])
        if kind.startswith("tuple"):
            inner = ",".join(canonical(c) for c in item["components"])
            return f"({inner}){kind[len('tuple') :]}"
        return kind

    return f"{entry['name']}({','.join(canonical(i) for i in entry.get('inputs', []))})"


def test_abi_has_everything_x402_calls(dev: DevChain) -> None:
    """Every function and event in x402's ABI for the escrow exists with the same signature,
    outputs and mutability, and the events are the scheme's."""
    ours = {(e["type"], _signature(e)): e for e in escrow_abi() if "name" in e}
    for entry in BATCH_SETTLEMENT_ABI:
        key = (entry["type"], _signature(entry))
        assert key in ours, key
        if entry["type"] == "function":
            mine = ours[key]
            assert [o["type"] for o in mine["outputs"]] == [o["type"] for o in entry["outputs"]]
            assert mine["stateMutability"] == entry["stateMutability"], key
    assert {_signature(e) for e in escrow_abi() if e["type"] == "event"} == SCHEME_EVENTS
    assert bytes(dev.w3.eth.get_code(BATCH_SETTLEMENT_ADDRESS))
    assert bytes(dev.w3.eth.get_code(ERC3009_DEPOSIT_COLLECTOR_ADDRESS))


def test_every_named_revert_is_declared_and_tested() -> None:
    """The sources raise exactly the scheme's errors (plus the reference's helper errors), and
    the revert table below covers each one that the dev chain can reach."""
    declared = set()
    for source in (ESCROW_SOURCE, ERC3009_COLLECTOR_SOURCE, PERMIT2_COLLECTOR_SOURCE):
        for name in re.findall(r'method_id\(\s*"([A-Za-z0-9]+\([^)]*\))"', source.read_text()):
            if name[0].isupper():  # errors are CapWords; function selectors are not
                declared.add(name)
    assert SCHEME_ERRORS <= declared, SCHEME_ERRORS - declared
    assert set(REVERTS) == declared - UNREACHABLE_ERRORS


def test_ids_and_digests_match_x402(dev: DevChain, escrow: Contract, parties: Parties) -> None:
    """The channel id and every EIP-712 digest the contract checks are the ones x402's client
    and authorizer sign: same domain, same types."""
    payer = Account.create()
    config = new_config(dev, payer, parties)
    channel_id = compute_channel_id(config, dev.network)
    onchain = escrow.functions.getChannelId(to_contract_channel_config(config)).call()
    assert "0x" + onchain.hex() == channel_id
    domain = get_batch_settlement_eip712_domain(dev.chain_id)

    def digest(types: dict[str, Any], message: dict[str, Any]) -> bytes:
        signable = encode_typed_data(domain_data=domain, message_types=types, message_data=message)
        return keccak(b"\x19" + signable.version + signable.header + signable.body)

    cid = bytes.fromhex(channel_id[2:])
    assert escrow.functions.getVoucherDigest(cid, 12345).call() == digest(
        VOUCHER_TYPES, {"channelId": cid, "maxClaimableAmount": 12345}
    )
    assert escrow.functions.getRefundDigest(cid, 7, 999).call() == digest(
        REFUND_TYPES, {"channelId": cid, "nonce": 7, "amount": 999}
    )
    channel = Channel(config, channel_id, payer)
    rows = [claim_row(channel, 5000, "0x" + "11" * 65, 4000), claim_row(channel, 7000, "0x")]
    entries = [
        {"channelId": cid, "maxClaimableAmount": 5000, "totalClaimed": 4000},
        {"channelId": cid, "maxClaimableAmount": 7000, "totalClaimed": 7000},
    ]
    assert escrow.functions.getClaimBatchDigest(claim_args(rows)).call() == digest(
        CLAIM_BATCH_TYPES, {"claims": entries}
    )
    assert escrow.functions.getClaimBatchDigest([]).call() == digest(
        CLAIM_BATCH_TYPES, {"claims": []}
    )
    mine = dev.escrow()
    fields, name, version, chain_id, contract, _, _ = mine.functions.eip712Domain().call()
    assert (name, version, chain_id, contract) == (
        domain["name"],
        domain["version"],
        dev.chain_id,
        BATCH_SETTLEMENT_ADDRESS,
    )
    assert fields == b"\x0f"
    assert mine.functions.MIN_WITHDRAW_DELAY().call() == MIN_WITHDRAW_DELAY
    assert mine.functions.MAX_WITHDRAW_DELAY().call() == MAX_WITHDRAW_DELAY


# ---------------------------------------------------------------------------------------------
# Deposit, claim, settle
# ---------------------------------------------------------------------------------------------


def test_deposit_through_the_erc3009_collector(
    dev: DevChain, escrow: Contract, events: Contract, parties: Parties
) -> None:
    """A gasless deposit: the payer only signs; the relayer submits; the collector pulls the
    tokens with receiveWithAuthorization and hands them to the escrow. A top-up adds to the
    same channel; a replayed authorization is refused by the token."""
    payer: LocalAccount = Account.create()
    dev.fund(payer.address, 50_000, eth_wei=0)
    config = new_config(dev, payer, parties)
    channel = Channel(config, compute_channel_id(config, dev.network), payer)
    held = dev.usdc_balance(BATCH_SETTLEMENT_ADDRESS)

    first = deposit_call(dev, escrow, payer, config, DEPOSIT)
    receipt = transact(dev, dev.relayer, first)
    assert channel_state(escrow, channel) == (DEPOSIT, 0)
    assert dev.usdc_balance(payer.address) == 50_000 - DEPOSIT
    assert dev.usdc_balance(BATCH_SETTLEMENT_ADDRESS) == held + DEPOSIT
    assert dev.usdc_balance(ERC3009_DEPOSIT_COLLECTOR_ADDRESS) == 0
    assert dev.eth_balance(payer.address) == 0
    created = logged(events, receipt, "ChannelCreated")
    assert [("0x" + c["channelId"].hex(), tuple(c["config"].values())) for c in created] == [
        (channel.id, tuple(to_contract_channel_config(config)))
    ]
    assert logged(events, receipt, "Deposited") == [
        {
            "channelId": bytes.fromhex(channel.id[2:]),
            "sender": dev.relayer.address,
            "amount": DEPOSIT,
            "newBalance": DEPOSIT,
        }
    ]

    # The replay of the same signed authorization: the token refuses the used nonce.
    with pytest.raises(ContractLogicError, match="authorization is used or canceled"):
        first.call({"from": dev.relayer.address})

    top_up = transact(dev, dev.relayer, deposit_call(dev, escrow, payer, config, 5_000))
    assert channel_state(escrow, channel) == (DEPOSIT + 5_000, 0)
    assert logged(events, top_up, "ChannelCreated") == []
    assert logged(events, top_up, "Deposited")[0]["newBalance"] == DEPOSIT + 5_000

    # An expired authorization, or one for more than the payer holds, fails in the token.
    expired = deposit_call(dev, escrow, payer, config, 100, valid_before=int(time.time()) - 1)
    with pytest.raises(ContractLogicError, match="authorization is expired"):
        expired.call({"from": dev.relayer.address})
    too_much = deposit_call(dev, escrow, payer, config, 10**9)
    with pytest.raises(ContractLogicError, match="exceeds balance"):
        too_much.call({"from": dev.relayer.address})


def test_claim_then_settle(
    dev: DevChain, escrow: Contract, events: Contract, parties: Parties
) -> None:
    """The receiver claims cumulative vouchers (an older one is a no-op), then anyone settles:
    the claimed total moves to the receiver once."""
    channel = open_channel(dev, escrow, parties)
    receiver = parties.receiver
    before = dev.usdc_balance(receiver.address)

    rows = [claim_row(channel, 3 * PRICE, voucher(dev, channel, 3 * PRICE))]
    receipt = transact(dev, receiver, escrow.functions.claim(claim_args(rows)))
    assert channel_state(escrow, channel) == (DEPOSIT, 3 * PRICE)
    assert logged(events, receipt, "Claimed") == [
        {
            "channelId": bytes.fromhex(channel.id[2:]),
            "sender": receiver.address,
            "claimAmount": 3 * PRICE,
            "newTotalClaimed": 3 * PRICE,
        }
    ]
    claimed, settled = escrow.functions.receivers(receiver.address, token(dev)).call()
    assert claimed - settled >= 3 * PRICE

    # The receiver authorizer may claim too; a voucher below the claimed total changes nothing.
    older = [claim_row(channel, 2 * PRICE, voucher(dev, channel, 2 * PRICE))]
    receipt = transact(dev, parties.authorizer, escrow.functions.claim(claim_args(older)))
    assert logged(events, receipt, "Claimed") == []
    later = [claim_row(channel, 5 * PRICE, voucher(dev, channel, 5 * PRICE), 4 * PRICE)]
    receipt = transact(dev, parties.authorizer, escrow.functions.claim(claim_args(later)))
    assert logged(events, receipt, "Claimed")[0]["claimAmount"] == PRICE
    assert channel_state(escrow, channel) == (DEPOSIT, 4 * PRICE)

    receipt = transact(dev, parties.stranger, escrow.functions.settle(receiver.address, token(dev)))
    (settled_event,) = logged(events, receipt, "Settled")
    assert settled_event["sender"] == parties.stranger.address
    assert dev.usdc_balance(receiver.address) == before + settled_event["amount"]
    assert settled_event["amount"] >= 4 * PRICE
    claimed, settled = escrow.functions.receivers(receiver.address, token(dev)).call()
    assert claimed == settled
    # Nothing left: settle is a no-op, not a revert.
    again = transact(dev, parties.stranger, escrow.functions.settle(receiver.address, token(dev)))
    assert logged(events, again, "Settled") == []
    assert dev.usdc_balance(receiver.address) == before + settled_event["amount"]
    # Settling does not touch the channel: its escrow still backs what was claimed.
    assert channel_state(escrow, channel) == (DEPOSIT, 4 * PRICE)


def test_claim_without_payer_authorizer_checks_the_payer(
    dev: DevChain, escrow: Contract, parties: Parties
) -> None:
    """With no payer authorizer, the voucher must be the payer's own signature."""
    channel = open_channel(dev, escrow, parties, payer_authorizer=ZERO_ADDRESS)
    forged = [claim_row(channel, PRICE, voucher(dev, channel, PRICE, signer=parties.stranger))]
    assert_reverts(
        escrow.functions.claim(claim_args(forged)),
        parties.receiver.address,
        "InvalidSignature()",
    )
    rows = [claim_row(channel, PRICE, voucher(dev, channel, PRICE))]
    transact(dev, parties.receiver, escrow.functions.claim(claim_args(rows)))
    assert channel_state(escrow, channel) == (DEPOSIT, PRICE)


def test_claim_with_signature_from_a_relay(
    dev: DevChain, escrow: Contract, events: Contract, parties: Parties
) -> None:
    """Anyone may submit a batch the receiver authorizer signed; it claims every row."""
    one = open_channel(dev, escrow, parties)
    two = open_channel(dev, escrow, parties)
    rows = [
        claim_row(one, 2 * PRICE, voucher(dev, one, 2 * PRICE)),
        claim_row(two, 7 * PRICE, voucher(dev, two, 7 * PRICE), 6 * PRICE),
    ]
    call = escrow.functions.claimWithSignature(
        claim_args(rows), batch_signature(dev, parties.authorizer, rows)
    )
    receipt = transact(dev, parties.stranger, call)
    assert channel_state(escrow, one) == (DEPOSIT, 2 * PRICE)
    assert channel_state(escrow, two) == (DEPOSIT, 6 * PRICE)
    assert [e["claimAmount"] for e in logged(events, receipt, "Claimed")] == [
        2 * PRICE,
        6 * PRICE,
    ]
    # The same signed batch again: every row is at or below its claimed total, so no-op.
    receipt = transact(dev, parties.stranger, call)
    assert logged(events, receipt, "Claimed") == []


# A contract wallet for the EIP-1271 paths: it accepts any signature over a digest it was told
# to approve (test only: anyone may approve).
WALLET_SOURCE = """
# pragma version ~=0.4.3
approved: public(HashMap[bytes32, bool])

@external
def approve(digest: bytes32):
    self.approved[digest] = True

@view
@external
def isValidSignature(digest: bytes32, signature: Bytes[1024]) -> bytes4:
    if self.approved[digest]:
        return 0x1626ba7e
    return 0xffffffff
"""


def contract_wallet(dev: DevChain) -> Contract:
    import vyper  # type: ignore[import-untyped]  # the dev extra; no type information

    out = vyper.compile_code(WALLET_SOURCE, output_formats=["bytecode_runtime", "abi"])
    address = to_checksum_address(Account.create().address)
    dev.rpc("anvil_setCode", [address, out["bytecode_runtime"]])
    return dev.w3.eth.contract(address=address, abi=out["abi"])


def test_contract_wallets_sign_through_eip1271(
    dev: DevChain, escrow: Contract, parties: Parties
) -> None:
    """A payer with code (no payer authorizer) and a receiver authorizer with code are asked
    through EIP-1271: the deposit's authorization, the voucher, the claim batch and the refund
    each count only once the wallet approves their digest."""
    payer, authorizer = contract_wallet(dev), contract_wallet(dev)

    def approve(wallet: Contract, digest: bytes) -> None:
        transact(dev, parties.stranger, wallet.functions.approve(digest))

    dev.fund(payer.address, DEPOSIT, eth_wei=0)
    config = ChannelConfig(
        payer=payer.address,
        payer_authorizer=ZERO_ADDRESS,
        receiver=parties.receiver.address,
        receiver_authorizer=authorizer.address,
        token=token(dev),
        withdraw_delay=MIN_WITHDRAW_DELAY,
        salt="0x" + secrets.token_hex(32),
    )
    channel = Channel(config, compute_channel_id(config, dev.network), Account.create())

    # The deposit: the token asks the payer wallet about its ReceiveWithAuthorization digest.
    salt, before = "0x" + secrets.token_hex(32), int(time.time()) + 600
    _, name, version = usdc_defaults(dev.chain_id)
    signable = encode_typed_data(
        domain_data={
            "name": name,
            "version": version,
            "chainId": dev.chain_id,
            "verifyingContract": token(dev),
        },
        message_types=RECEIVE_AUTHORIZATION_TYPES,
        message_data={
            "from": payer.address,
            "to": ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
            "value": DEPOSIT,
            "validAfter": 0,
            "validBefore": before,
            "nonce": bytes.fromhex(build_erc3009_deposit_nonce(channel.id, salt)[2:]),
        },
    )
    approve(payer, keccak(b"\x19" + signable.version + signable.header + signable.body))
    data = build_erc3009_collector_data("0", str(before), salt, "0x" + "ab" * 65)
    call = escrow.functions.deposit(channel.args, DEPOSIT, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, data)
    transact(dev, dev.relayer, call)
    assert channel_state(escrow, channel) == (DEPOSIT, 0)

    # The voucher: refused until the payer wallet approves its digest.
    rows = [claim_row(channel, 2 * PRICE, "0x" + "cd" * 65)]
    claim = escrow.functions.claim(claim_args(rows))
    assert_reverts(claim, parties.receiver.address, "InvalidSignature()")
    approve(payer, escrow.functions.getVoucherDigest(channel.id, 2 * PRICE).call())
    transact(dev, parties.receiver, claim)
    assert channel_state(escrow, channel) == (DEPOSIT, 2 * PRICE)

    # The claim batch and the refund: the receiver authorizer wallet's approval.
    rows = [claim_row(channel, 3 * PRICE, "0x" + "cd" * 65)]
    approve(payer, escrow.functions.getVoucherDigest(channel.id, 3 * PRICE).call())
    batch = escrow.functions.claimWithSignature(claim_args(rows), b"\x01")
    assert_reverts(batch, parties.stranger.address, "InvalidSignature()")
    approve(authorizer, escrow.functions.getClaimBatchDigest(claim_args(rows)).call())
    transact(dev, parties.stranger, batch)
    refund = escrow.functions.refundWithSignature(channel.args, PRICE, 0, b"\x01")
    assert_reverts(refund, parties.stranger.address, "InvalidSignature()")
    approve(authorizer, escrow.functions.getRefundDigest(channel.id, 0, PRICE).call())
    transact(dev, parties.stranger, refund)
    assert channel_state(escrow, channel) == (DEPOSIT - PRICE, 3 * PRICE)
    assert dev.usdc_balance(payer.address) == PRICE


# ---------------------------------------------------------------------------------------------
# Refunds
# ---------------------------------------------------------------------------------------------


def test_cooperative_refunds_and_their_nonce(
    dev: DevChain, escrow: Contract, events: Contract, parties: Parties
) -> None:
    """The receiver refunds directly, or anyone submits the receiver authorizer's signed Refund
    for the channel's current nonce. Each refund advances the nonce (a used or stale
    signature is refused), is capped at the unclaimed escrow, and never touches claims."""
    channel = open_channel(dev, escrow, parties)
    payer = channel.payer.address
    held = dev.usdc_balance(payer)
    rows = [claim_row(channel, 2 * PRICE, voucher(dev, channel, 2 * PRICE))]
    transact(dev, parties.receiver, escrow.functions.claim(claim_args(rows)))
    assert escrow.functions.refundNonce(channel.id).call() == 0

    receipt = transact(dev, parties.receiver, escrow.functions.refund(channel.args, PRICE))
    assert escrow.functions.refundNonce(channel.id).call() == 1
    assert dev.usdc_balance(payer) == held + PRICE
    assert channel_state(escrow, channel) == (DEPOSIT - PRICE, 2 * PRICE)
    assert logged(events, receipt, "Refunded")[0]["amount"] == PRICE

    # A signature made for nonce 0 is stale now; one for nonce 1 works, from anyone.
    stale = refund_signature(dev, parties.authorizer, channel, PRICE, 0)
    assert_reverts(
        escrow.functions.refundWithSignature(channel.args, PRICE, 0, stale),
        parties.stranger.address,
        "InvalidRefundNonce()",
    )
    signed = refund_signature(dev, parties.authorizer, channel, 2 * PRICE, 1)
    call = escrow.functions.refundWithSignature(channel.args, 2 * PRICE, 1, signed)
    transact(dev, parties.stranger, call)
    assert escrow.functions.refundNonce(channel.id).call() == 2
    assert dev.usdc_balance(payer) == held + 3 * PRICE
    assert_reverts(call, parties.stranger.address, "InvalidRefundNonce()")  # no replay

    # More than is unclaimed: capped, the claimed part stays for the receiver.
    receipt = transact(dev, parties.authorizer, escrow.functions.refund(channel.args, DEPOSIT))
    unclaimed = DEPOSIT - 3 * PRICE - 2 * PRICE
    assert logged(events, receipt, "Refunded")[0]["amount"] == unclaimed
    assert channel_state(escrow, channel) == (2 * PRICE, 2 * PRICE)
    assert logged(events, receipt, "ChannelClosed") == []  # claims remain
    # Nothing left to refund: no transfer, no event, but the nonce still moves.
    receipt = transact(dev, parties.receiver, escrow.functions.refund(channel.args, PRICE))
    assert logged(events, receipt, "Refunded") == []
    assert escrow.functions.refundNonce(channel.id).call() == 4
    assert dev.usdc_balance(payer) == held + DEPOSIT - 2 * PRICE


def test_full_refund_closes_an_unclaimed_channel(
    dev: DevChain, escrow: Contract, events: Contract, parties: Parties
) -> None:
    channel = open_channel(dev, escrow, parties)
    receipt = transact(dev, parties.receiver, escrow.functions.refund(channel.args, DEPOSIT))
    assert channel_state(escrow, channel) == (0, 0)
    (closed,) = logged(events, receipt, "ChannelClosed")
    assert tuple(closed["config"].values()) == tuple(channel.args)


# ---------------------------------------------------------------------------------------------
# The payer's timed withdrawal
# ---------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("rewind")
def test_withdraw_waits_for_the_delay_and_yields_to_claims(
    dev: DevChain, escrow: Contract, events: Contract, parties: Parties
) -> None:
    """The payer starts a withdrawal; finalising before the delay reverts; a claim landing in
    the meantime comes first; after the delay the payer gets what is still unclaimed."""
    channel = open_channel(dev, escrow, parties)
    payer = channel.payer
    held = dev.usdc_balance(payer.address)

    receipt = transact(dev, payer, escrow.functions.initiateWithdraw(channel.args, DEPOSIT))
    (started,) = logged(events, receipt, "WithdrawInitiated")
    initiated_at = dev.w3.eth.get_block(receipt["blockNumber"])["timestamp"]
    assert started["finalizeAfter"] == initiated_at + MIN_WITHDRAW_DELAY
    assert escrow.functions.pendingWithdrawals(channel.id).call() == [DEPOSIT, initiated_at]

    finalize = escrow.functions.finalizeWithdraw(channel.args)
    assert_reverts(finalize, payer.address, "WithdrawDelayNotElapsed()")
    time_travel(dev, MIN_WITHDRAW_DELAY - 60)
    assert_reverts(finalize, payer.address, "WithdrawDelayNotElapsed()")

    # The receiver claims during the delay: the voucher's value is safe.
    rows = [claim_row(channel, 3 * PRICE, voucher(dev, channel, 3 * PRICE))]
    transact(dev, parties.receiver, escrow.functions.claim(claim_args(rows)))

    time_travel(dev, 60)
    receipt = transact(dev, payer, finalize)
    (finished,) = logged(events, receipt, "WithdrawFinalized")
    assert finished["amount"] == DEPOSIT - 3 * PRICE
    assert dev.usdc_balance(payer.address) == held + DEPOSIT - 3 * PRICE
    assert channel_state(escrow, channel) == (3 * PRICE, 3 * PRICE)
    assert escrow.functions.pendingWithdrawals(channel.id).call() == [0, 0]
    assert_reverts(finalize, payer.address, "WithdrawalNotPending()")
    # What the receiver claimed is still there for it.
    receiver = parties.receiver.address
    before = dev.usdc_balance(receiver)
    transact(dev, parties.stranger, escrow.functions.settle(receiver, token(dev)))
    assert dev.usdc_balance(receiver) >= before + 3 * PRICE


@pytest.mark.usefixtures("rewind")
def test_withdraw_by_the_payer_authorizer_and_a_refund_meanwhile(
    dev: DevChain, escrow: Contract, events: Contract, parties: Parties
) -> None:
    """The payer authorizer may run the withdrawal (the tokens still go to the payer); a
    refund during the delay shrinks the pending amount, and one covering it clears it."""
    delegate = account_with_gas(dev)
    channel = open_channel(dev, escrow, parties, payer_authorizer=delegate.address, payer_gas=False)
    held = dev.usdc_balance(channel.payer.address)

    transact(dev, delegate, escrow.functions.initiateWithdraw(channel.args, 4 * PRICE))
    transact(dev, parties.receiver, escrow.functions.refund(channel.args, PRICE))
    assert escrow.functions.pendingWithdrawals(channel.id).call()[0] == 3 * PRICE

    time_travel(dev, MIN_WITHDRAW_DELAY)
    receipt = transact(dev, delegate, escrow.functions.finalizeWithdraw(channel.args))
    assert logged(events, receipt, "WithdrawFinalized")[0]["sender"] == delegate.address
    assert dev.usdc_balance(channel.payer.address) == held + 4 * PRICE
    assert dev.usdc_balance(delegate.address) == 0

    transact(dev, delegate, escrow.functions.initiateWithdraw(channel.args, PRICE))
    transact(dev, parties.receiver, escrow.functions.refund(channel.args, 2 * PRICE))
    assert escrow.functions.pendingWithdrawals(channel.id).call() == [0, 0]


# ---------------------------------------------------------------------------------------------
# Every revert the scheme names
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    dev: DevChain
    escrow: Contract
    parties: Parties
    channel: Channel  # funded with DEPOSIT, payer authorizer = payer, nothing claimed


Scenario = Callable[[Setup], tuple[ContractFunction, str]]
REVERTS: dict[str, Scenario] = {}


def reverts_with(error: str) -> Callable[[Scenario], Scenario]:
    def register(scenario: Scenario) -> Scenario:
        REVERTS[error] = scenario
        return scenario

    return register


@pytest.fixture(scope="module")
def setup(dev: DevChain, escrow: Contract, parties: Parties) -> Setup:
    return Setup(dev, escrow, parties, open_channel(dev, escrow, parties))


def _config_args(s: Setup, **changes: Any) -> tuple[Any, ...]:
    fields = dict(zip(
        ("payer", "payer_authorizer", "receiver", "receiver_authorizer", "token",
         "withdraw_delay", "salt"),
        to_contract_channel_config(s.channel.config),
        strict=True,
    ))  # fmt: skip
    fields.update(changes)
    return tuple(fields.values())


def _deposit(s: Setup, args: tuple[Any, ...], amount: int = 1, collector: str | None = None):
    return s.escrow.functions.deposit(
        args, amount, collector or ERC3009_DEPOSIT_COLLECTOR_ADDRESS, b""
    )


@reverts_with("InvalidChannel()")
def _invalid_channel(s: Setup) -> tuple[ContractFunction, str]:
    for field in ("payer", "receiver", "receiver_authorizer", "token"):
        call = _deposit(s, _config_args(s, **{field: ZERO_ADDRESS}))
        assert_reverts(call, s.dev.relayer.address, "InvalidChannel()")
    # Only the payer side may start a withdrawal.
    return s.escrow.functions.initiateWithdraw(s.channel.args, 1), s.parties.stranger.address


@reverts_with("WithdrawDelayOutOfRange()")
def _delay_out_of_range(s: Setup) -> tuple[ContractFunction, str]:
    too_long = _deposit(s, _config_args(s, withdraw_delay=MAX_WITHDRAW_DELAY + 1))
    assert_reverts(too_long, s.dev.relayer.address, "WithdrawDelayOutOfRange()")
    return (
        _deposit(s, _config_args(s, withdraw_delay=MIN_WITHDRAW_DELAY - 1)),
        s.dev.relayer.address,
    )


@reverts_with("ZeroDeposit()")
def _zero_deposit(s: Setup) -> tuple[ContractFunction, str]:
    return _deposit(s, s.channel.args, amount=0), s.dev.relayer.address


@reverts_with("InvalidCollector()")
def _no_collector(s: Setup) -> tuple[ContractFunction, str]:
    return _deposit(s, s.channel.args, collector=ZERO_ADDRESS), s.dev.relayer.address


@reverts_with("DepositOverflow()")
def _deposit_overflow(s: Setup) -> tuple[ContractFunction, str]:
    return _deposit(s, s.channel.args, amount=UINT128_MAX), s.dev.relayer.address


@reverts_with("DepositCollectionFailed()")
def _collector_that_takes_nothing(s: Setup) -> tuple[ContractFunction, str]:
    idle = Account.create().address
    s.dev.rpc("anvil_setCode", [idle, "0x00"])  # STOP: every call succeeds, moves nothing
    return _deposit(s, s.channel.args, amount=PRICE, collector=idle), s.dev.relayer.address


@reverts_with("EmptyBatch()")
def _empty_batch(s: Setup) -> tuple[ContractFunction, str]:
    signed = s.escrow.functions.claimWithSignature([], b"")
    assert_reverts(signed, s.parties.stranger.address, "EmptyBatch()")
    return s.escrow.functions.claim([]), s.parties.receiver.address


@reverts_with("NotAuthorizedToClaim()")
def _claim_by_stranger(s: Setup) -> tuple[ContractFunction, str]:
    rows = [claim_row(s.channel, PRICE, voucher(s.dev, s.channel, PRICE))]
    return s.escrow.functions.claim(claim_args(rows)), s.parties.stranger.address


@reverts_with("ClaimExceedsCeiling()")
def _claim_above_voucher(s: Setup) -> tuple[ContractFunction, str]:
    rows = [claim_row(s.channel, PRICE, voucher(s.dev, s.channel, PRICE), PRICE + 1)]
    return s.escrow.functions.claim(claim_args(rows)), s.parties.receiver.address


@reverts_with("ClaimExceedsBalance()")
def _claim_above_deposit(s: Setup) -> tuple[ContractFunction, str]:
    rows = [claim_row(s.channel, DEPOSIT + 1, voucher(s.dev, s.channel, DEPOSIT + 1))]
    return s.escrow.functions.claim(claim_args(rows)), s.parties.receiver.address


@reverts_with("InvalidSignature()")
def _invalid_signatures(s: Setup) -> tuple[ContractFunction, str]:
    rows = [claim_row(s.channel, PRICE, voucher(s.dev, s.channel, PRICE))]
    # A claim batch signed by someone other than the receiver authorizer.
    forged_batch = batch_signature(s.dev, s.parties.stranger, rows)
    call = s.escrow.functions.claimWithSignature(claim_args(rows), forged_batch)
    assert_reverts(call, s.parties.stranger.address, "InvalidSignature()")
    # A refund signed by someone other than the receiver authorizer.
    forged_refund = refund_signature(s.dev, s.parties.stranger, s.channel, PRICE, 0)
    call = s.escrow.functions.refundWithSignature(s.channel.args, PRICE, 0, forged_refund)
    assert_reverts(call, s.parties.stranger.address, "InvalidSignature()")
    # A voucher signed by someone other than the payer authorizer.
    forged = [
        claim_row(s.channel, PRICE, voucher(s.dev, s.channel, PRICE, signer=s.parties.stranger))
    ]
    return s.escrow.functions.claim(claim_args(forged)), s.parties.receiver.address


@reverts_with("NotReceiverAuthorizer()")
def _batch_across_authorizers(s: Setup) -> tuple[ContractFunction, str]:
    other = Parties(s.parties.receiver, Account.create(), s.parties.stranger)
    payer = Account.create()
    foreign = Channel(
        config := new_config(s.dev, payer, other),
        compute_channel_id(config, s.dev.network),
        payer,
    )
    rows = [
        claim_row(s.channel, PRICE, voucher(s.dev, s.channel, PRICE)),
        claim_row(foreign, PRICE, voucher(s.dev, foreign, PRICE)),
    ]
    signature = batch_signature(s.dev, s.parties.authorizer, rows)
    call = s.escrow.functions.claimWithSignature(claim_args(rows), signature)
    return call, s.parties.stranger.address


@reverts_with("NotAuthorizedToRefund()")
def _refund_by_stranger(s: Setup) -> tuple[ContractFunction, str]:
    return s.escrow.functions.refund(s.channel.args, PRICE), s.parties.stranger.address


@reverts_with("ZeroRefund()")
def _zero_refund(s: Setup) -> tuple[ContractFunction, str]:
    signature = refund_signature(s.dev, s.parties.authorizer, s.channel, 0, 0)
    signed = s.escrow.functions.refundWithSignature(s.channel.args, 0, 0, signature)
    assert_reverts(signed, s.parties.stranger.address, "ZeroRefund()")
    return s.escrow.functions.refund(s.channel.args, 0), s.parties.receiver.address


@reverts_with("InvalidRefundNonce()")
def _refund_nonce_ahead(s: Setup) -> tuple[ContractFunction, str]:
    signature = refund_signature(s.dev, s.parties.authorizer, s.channel, PRICE, 5)
    call = s.escrow.functions.refundWithSignature(s.channel.args, PRICE, 5, signature)
    return call, s.parties.stranger.address


@reverts_with("NothingToWithdraw()")
def _withdraw_nothing(s: Setup) -> tuple[ContractFunction, str]:
    return s.escrow.functions.initiateWithdraw(s.channel.args, 0), s.channel.payer.address


@reverts_with("WithdrawAmountExceedsAvailable()")
def _withdraw_too_much(s: Setup) -> tuple[ContractFunction, str]:
    call = s.escrow.functions.initiateWithdraw(s.channel.args, DEPOSIT + 1)
    return call, s.channel.payer.address


@reverts_with("WithdrawalAlreadyPending()")
def _withdraw_twice(s: Setup) -> tuple[ContractFunction, str]:
    channel = open_channel(s.dev, s.escrow, s.parties)
    transact(s.dev, channel.payer, s.escrow.functions.initiateWithdraw(channel.args, PRICE))
    return s.escrow.functions.initiateWithdraw(channel.args, PRICE), channel.payer.address


@reverts_with("WithdrawalNotPending()")
def _finalize_without_withdrawal(s: Setup) -> tuple[ContractFunction, str]:
    return s.escrow.functions.finalizeWithdraw(s.channel.args), s.channel.payer.address


@reverts_with("NotAuthorizedToFinalizeWithdraw()")
def _finalize_by_stranger(s: Setup) -> tuple[ContractFunction, str]:
    return s.escrow.functions.finalizeWithdraw(s.channel.args), s.parties.stranger.address


@reverts_with("WithdrawDelayNotElapsed()")
def _finalize_too_early(s: Setup) -> tuple[ContractFunction, str]:
    channel = open_channel(s.dev, s.escrow, s.parties)
    transact(s.dev, channel.payer, s.escrow.functions.initiateWithdraw(channel.args, PRICE))
    return s.escrow.functions.finalizeWithdraw(channel.args), channel.payer.address


def _broken_voucher(s: Setup, signature: bytes) -> ContractFunction:
    rows = [claim_row(s.channel, PRICE, "0x" + signature.hex())]
    return s.escrow.functions.claim(claim_args(rows))


@reverts_with("ECDSAInvalidSignatureLength(uint256)")
def _voucher_of_wrong_length(s: Setup) -> tuple[ContractFunction, str]:
    signature = bytes.fromhex(voucher(s.dev, s.channel, PRICE)[2:])
    return _broken_voucher(s, signature[:64]), s.parties.receiver.address


@reverts_with("ECDSAInvalidSignatureS(bytes32)")
def _voucher_with_high_s(s: Setup) -> tuple[ContractFunction, str]:
    signature = bytes.fromhex(voucher(s.dev, s.channel, PRICE)[2:])
    high_s = (SECP256K1_N - int.from_bytes(signature[32:64], "big")).to_bytes(32, "big")
    flipped = signature[:32] + high_s + bytes([55 - signature[64]])  # the malleable twin
    return _broken_voucher(s, flipped), s.parties.receiver.address


@reverts_with("ECDSAInvalidSignature()")
def _voucher_recovering_nobody(s: Setup) -> tuple[ContractFunction, str]:
    signature = bytes.fromhex(voucher(s.dev, s.channel, PRICE)[2:])
    return _broken_voucher(s, signature[:64] + b"\x1d"), s.parties.receiver.address


@reverts_with("FailedCall()")
def _multicall_step_without_reason(s: Setup) -> tuple[ContractFunction, str]:
    # An unknown selector reverts without data: the batch reverts with FailedCall. A step
    # that reverts with a reason passes that reason on instead.
    bubbled = s.escrow.functions.multicall([s.escrow.encode_abi("claim", args=[[]])])
    assert_reverts(bubbled, s.parties.receiver.address, "EmptyBatch()")
    return s.escrow.functions.multicall([b"\xde\xad\xbe\xef"]), s.parties.receiver.address


COLLECTORS = (
    (ERC3009_DEPOSIT_COLLECTOR_ADDRESS, deposit_collector_abi),
    (PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, permit2_deposit_collector_abi),
)


@reverts_with("OnlyX402BatchSettlement()")
def _collect_called_directly(s: Setup) -> tuple[ContractFunction, str]:
    calls = []
    for address, abi in COLLECTORS:
        collector = s.dev.w3.eth.contract(address=address, abi=abi())
        calls.append(
            collector.functions.collect(
                s.channel.payer.address, token(s.dev), PRICE, bytes.fromhex(s.channel.id[2:]), b""
            )
        )
    assert_reverts(calls[0], s.parties.stranger.address, "OnlyX402BatchSettlement()")
    return calls[1], s.parties.stranger.address


def _fresh_copy(s: Setup, address: str, abi: list[dict[str, Any]]) -> Contract:
    fresh = to_checksum_address(Account.create().address)
    runtime = s.dev.w3.eth.get_code(to_checksum_address(address))
    s.dev.rpc("anvil_setCode", [fresh, "0x" + bytes(runtime).hex()])
    return s.dev.w3.eth.contract(address=fresh, abi=abi)


@reverts_with("InvalidX402BatchSettlementAddress()")
def _collector_bound_to_nobody(s: Setup) -> tuple[ContractFunction, str]:
    permit2_collector = _fresh_copy(
        s, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, permit2_deposit_collector_abi()
    )
    call = permit2_collector.functions.initialize(ZERO_ADDRESS, PERMIT2_ADDRESS)
    assert_reverts(call, s.parties.stranger.address, "InvalidX402BatchSettlementAddress()")
    collector = _fresh_copy(s, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, deposit_collector_abi())
    return collector.functions.initialize(ZERO_ADDRESS), s.parties.stranger.address


@reverts_with("InvalidPermit2Address()")
def _collector_without_permit2(s: Setup) -> tuple[ContractFunction, str]:
    collector = _fresh_copy(s, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, permit2_deposit_collector_abi())
    call = collector.functions.initialize(BATCH_SETTLEMENT_ADDRESS, ZERO_ADDRESS)
    return call, s.parties.stranger.address


@reverts_with("Permit2612AmountMismatch()")
def _eip2612_permit_for_another_amount(s: Setup) -> tuple[ContractFunction, str]:
    permit = build_eip2612_permit_data("999", "0", 27, "0x" + "00" * 32, "0x" + "00" * 32)
    data = build_permit2_collector_data("1", "0", "0x" + "00" * 65, permit)
    call = s.escrow.functions.deposit(
        s.channel.args, PRICE, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, data
    )
    return call, s.dev.relayer.address


@pytest.mark.parametrize("error", sorted(REVERTS))
def test_named_revert(setup: Setup, error: str) -> None:
    call, sender = REVERTS[error](setup)
    assert_reverts(call, sender, error)


# ---------------------------------------------------------------------------------------------
# Deposits through Permit2
# ---------------------------------------------------------------------------------------------


def permit2_signature(
    dev: DevChain,
    owner: LocalAccount,
    amount: int,
    nonce: int,
    deadline: int,
    channel_id: str,
    spender: str = PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
) -> str:
    """The payer's PermitWitnessTransferFrom signature, as x402's client signs it."""
    signature = EthAccountSigner(owner).sign_typed_data(
        {"name": "Permit2", "chainId": dev.chain_id, "verifyingContract": PERMIT2_ADDRESS},
        BATCH_PERMIT2_WITNESS_TYPES,
        "PermitWitnessTransferFrom",
        {
            "permitted": {"token": token(dev), "amount": amount},
            "spender": spender,
            "nonce": nonce,
            "deadline": deadline,
            "witness": {"channelId": bytes.fromhex(channel_id[2:])},
        },
    )
    return "0x" + signature.hex()


def test_deposit_through_permit2(
    dev: DevChain, escrow: Contract, events: Contract, parties: Parties
) -> None:
    """The payer approves Permit2 once, then signs a witness transfer bound to the channel; the
    collector pulls it straight into the escrow. The nonce is single use, the witness binds
    the channel, and a failing EIP-2612 permit is only logged (with its revert reason)."""
    payer = account_with_gas(dev, usdc=50_000)
    usdc = dev.w3.eth.contract(address=token(dev), abi=token_abi())
    transact(dev, payer, usdc.functions.approve(PERMIT2_ADDRESS, 2**256 - 1))
    config = new_config(dev, payer, parties)
    channel = Channel(config, compute_channel_id(config, dev.network), payer)
    deadline = int(time.time()) + 600

    signature = permit2_signature(dev, payer, DEPOSIT, 7, deadline, channel.id)
    data = build_permit2_collector_data("7", str(deadline), signature)
    deposit = escrow.functions.deposit(
        channel.args, DEPOSIT, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, data
    )
    receipt = transact(dev, dev.relayer, deposit)
    assert channel_state(escrow, channel) == (DEPOSIT, 0)
    assert dev.usdc_balance(payer.address) == 50_000 - DEPOSIT
    assert logged(events, receipt, "Deposited")[0]["newBalance"] == DEPOSIT
    assert_reverts(deposit, dev.relayer.address, "InvalidNonce()")  # no replay

    # The same signature cannot fund another channel: the witness names this one.
    other = new_config(dev, payer, parties)
    stolen = escrow.functions.deposit(
        to_contract_channel_config(other),
        DEPOSIT,
        PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
        build_permit2_collector_data("8", str(deadline), signature),
    )
    assert_reverts(stolen, dev.relayer.address, "InvalidSigner()")

    # An EIP-2612 permit the dev USDC cannot honour (it has no `permit`) is logged; the
    # Permit2 transfer then relies on the approval.
    signature = permit2_signature(dev, payer, PRICE, 9, deadline, channel.id)
    permit = build_eip2612_permit_data(
        str(PRICE), str(deadline), 27, "0x" + "11" * 32, "0x" + "22" * 32
    )
    data = build_permit2_collector_data("9", str(deadline), signature, permit)
    call = escrow.functions.deposit(channel.args, PRICE, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, data)
    receipt = transact(dev, dev.relayer, call)
    collector = dev.w3.eth.contract(
        address=PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, abi=permit2_deposit_collector_abi()
    )
    (failed,) = collector.events.EIP2612PermitFailedWithReason().process_receipt(
        receipt, errors=DISCARD
    )
    assert failed["args"]["owner"] == payer.address
    assert failed["args"]["reason"] == "unknown function"  # the dev USDC's fallback
    assert channel_state(escrow, channel) == (DEPOSIT + PRICE, 0)


def test_permit2_refusals(dev: DevChain, parties: Parties) -> None:
    """Permit2's own checks, called directly by a spender: deadline, amount, nonce, signer and
    signature shape (65 bytes, or 64 in EIP-2098's compact form), each with Permit2's error."""
    owner = account_with_gas(dev, usdc=10_000)
    usdc = dev.w3.eth.contract(address=token(dev), abi=token_abi())
    transact(dev, owner, usdc.functions.approve(PERMIT2_ADDRESS, 2**256 - 1))
    permit2 = dev.w3.eth.contract(address=PERMIT2_ADDRESS, abi=permit2_abi())
    spender = parties.stranger
    channel_id = "0x" + secrets.token_hex(32)
    witness = keccak(
        keccak(text="DepositWitness(bytes32 channelId)") + bytes.fromhex(channel_id[2:])
    )
    witness_type = (
        "DepositWitness witness)DepositWitness(bytes32 channelId)"
        "TokenPermissions(address token,uint256 amount)"
    )

    def transfer(nonce: int, deadline: int, signature: str, requested: int = PRICE) -> Any:
        return permit2.functions.permitWitnessTransferFrom(
            ((token(dev), PRICE), nonce, deadline),
            (spender.address, requested),
            owner.address,
            witness,
            witness_type,
            bytes.fromhex(signature[2:]),
        )

    deadline = int(time.time()) + 600
    good = permit2_signature(dev, owner, PRICE, 1, deadline, channel_id, spender.address)
    expired = permit2_signature(dev, owner, PRICE, 1, 1, channel_id, spender.address)
    assert_reverts(transfer(1, 1, expired), spender.address, "SignatureExpired(uint256)")
    assert_reverts(
        transfer(1, deadline, good, PRICE + 1), spender.address, "InvalidAmount(uint256)"
    )
    assert_reverts(transfer(1, deadline, good[:-4]), spender.address, "InvalidSignatureLength()")
    zeroed = "0x" + "00" * 64 + "1b"
    assert_reverts(transfer(1, deadline, zeroed), spender.address, "InvalidSignature()")
    stranger_signed = permit2_signature(
        dev, spender, PRICE, 1, deadline, channel_id, spender.address
    )
    assert_reverts(transfer(1, deadline, stranger_signed), spender.address, "InvalidSigner()")
    # Another spender cannot use a signature naming this one.
    assert_reverts(transfer(1, deadline, good), parties.receiver.address, "InvalidSigner()")

    # The EIP-2098 compact form (64 bytes: r, then s with v's parity in the top bit) works.
    raw = bytes.fromhex(good[2:])
    vs = int.from_bytes(raw[32:64], "big") | ((raw[64] - 27) << 255)
    compact = "0x" + raw[:32].hex() + vs.to_bytes(32, "big").hex()
    transact(dev, spender, transfer(1, deadline, compact))
    assert dev.usdc_balance(spender.address) == PRICE
    assert_reverts(transfer(1, deadline, good), spender.address, "InvalidNonce()")
    assert permit2.functions.nonceBitmap(owner.address, 0).call() == 2


# ---------------------------------------------------------------------------------------------
# x402's own client and facilitator, unchanged
# ---------------------------------------------------------------------------------------------


def batch_requirements(dev: DevChain, parties: Parties, **extra: str) -> PaymentRequirements:
    """What a server's 402 offers for batch-settlement on the dev chain: the dev USDC at the
    price, paid to the receiver, with its authorizer and the shortest withdraw delay."""
    _, name, version = usdc_defaults(dev.chain_id)
    return PaymentRequirements(
        scheme="batch-settlement",
        network=dev.network,
        asset=token(dev),
        amount=str(PRICE),
        pay_to=parties.receiver.address,
        max_timeout_seconds=300,
        extra={
            "name": name,
            "version": version,
            "receiverAuthorizer": parties.authorizer.address,
            "withdrawDelay": MIN_WITHDRAW_DELAY,
            **extra,
        },
    )


def test_stock_x402_client_and_facilitator(
    dev: DevChain, escrow: Contract, parties: Parties
) -> None:
    """x402's client scheme opens a channel (deposit + voucher) and pays three more calls with
    vouchers; x402's facilitator scheme, self-settling through the dev relayer, verifies and
    settles the deposit, verifies each voucher against the chain, claims them with the
    receiver authorizer's batch signature, settles to the receiver, then refunds the rest in
    one claim + refund multicall. Four transactions for four paid calls and the close."""
    requirements = batch_requirements(dev, parties)
    offer = PaymentRequired(
        accepts=[requirements], resource=ResourceInfo(url="http://engram.test/v1/recall")
    )
    payer: LocalAccount = Account.create()
    dev.fund(payer.address, 1_000_000, eth_wei=0)  # the payer never pays gas
    # Deposits of 10 calls' worth (x402's default is 5), so something is left to refund.
    policy = BatchSettlementDepositPolicy(deposit_multiplier=10)
    client_scheme = BatchSettlementEvmScheme(EthAccountSigner(payer), policy)
    client = x402ClientSync().register(dev.network, client_scheme)
    facilitator = x402FacilitatorSync().register(
        [dev.network],
        BatchSettlementEvmFacilitator(
            FacilitatorWeb3Signer(private_key=dev.relayer.key.hex(), rpc_url=dev.rpc_url),
            authorizer_signer=LocalAuthorizerSigner(parties.authorizer),
        ),
    )
    first_block = dev.w3.eth.block_number

    def served(payload: PaymentPayload, transaction: str = "") -> None:
        """What a server's answer tells the client: this call was charged PRICE."""
        client.handle_payment_response(
            PaymentResponseContext(
                payment_payload=payload,
                requirements=requirements,
                settle_response=SettleResponse(
                    success=True,
                    transaction=transaction,
                    network=dev.network,
                    extra={"chargedAmount": str(PRICE)},
                ),
            )
        )

    opening = client.create_payment_payload(offer)
    assert isinstance(opening, PaymentPayload)
    assert opening.payload["type"] == "deposit"
    deposit = int(opening.payload["deposit"]["amount"])
    verified = facilitator.verify(opening, requirements)
    assert verified.is_valid, verified
    settled = facilitator.settle(opening, requirements)
    assert settled.success, settled
    channel_id = opening.payload["voucher"]["channelId"]
    assert escrow.functions.channels(channel_id).call() == [deposit, 0]
    assert dev.usdc_balance(payer.address) == 1_000_000 - deposit
    served(opening, settled.transaction)

    last = opening
    for call in range(2, 5):
        last = client.create_payment_payload(offer)
        assert isinstance(last, PaymentPayload)
        assert last.payload["type"] == "voucher"
        assert int(last.payload["voucher"]["maxClaimableAmount"]) == call * PRICE
        verified = facilitator.verify(last, requirements)
        assert verified.is_valid, verified
        assert verified.extra is not None and verified.extra["balance"] == str(deposit)
        served(last)
    assert dev.w3.eth.block_number == first_block + 1  # vouchers touch no chain

    config = ChannelConfig.from_dict(last.payload["channelConfig"])
    signed = last.payload["voucher"]
    claim = ClaimPayload(
        claims=[
            VoucherClaim(config, signed["maxClaimableAmount"], signed["signature"], str(4 * PRICE))
        ]
    )
    claimed = facilitator.settle(
        PaymentPayload(accepted=requirements, payload=claim.to_dict()), requirements
    )
    assert claimed.success, claimed
    assert escrow.functions.channels(channel_id).call() == [deposit, 4 * PRICE]

    receiver_before = dev.usdc_balance(parties.receiver.address)
    sweep = SettlePayload(receiver=parties.receiver.address, token=token(dev))
    swept = facilitator.settle(
        PaymentPayload(accepted=requirements, payload=sweep.to_dict()), requirements
    )
    assert swept.success, swept
    # The sweep's Settled log decodes with x402's own ABI (x402's facilitator reads it only
    # from signers exposing `w3`, which FacilitatorWeb3Signer does not, hence amount "").
    receipt = dev.w3.eth.get_transaction_receipt(swept.transaction)
    (log,) = escrow.events.Settled().process_receipt(receipt, errors=DISCARD)
    assert log["args"]["receiver"] == parties.receiver.address
    assert log["args"]["amount"] >= 4 * PRICE  # with what earlier tests claimed for it
    after = dev.usdc_balance(parties.receiver.address)
    assert after == receiver_before + log["args"]["amount"]

    # A fifth call's voucher, claimed together with the refund of the rest (multicall).
    fifth = client.create_payment_payload(offer)
    assert isinstance(fifth, PaymentPayload)
    signed = fifth.payload["voucher"]
    assert int(signed["maxClaimableAmount"]) == 5 * PRICE
    refund = EnrichedRefundPayload(
        channel_config=config,
        voucher=VoucherFields.from_dict(signed),
        amount=str(deposit - 5 * PRICE),
        refund_nonce=str(escrow.functions.refundNonce(channel_id).call()),
        claims=[
            VoucherClaim(config, signed["maxClaimableAmount"], signed["signature"], str(5 * PRICE))
        ],
    )
    refunded = facilitator.settle(
        PaymentPayload(accepted=requirements, payload=refund.to_dict()), requirements
    )
    assert refunded.success, refunded.error_message
    assert refunded.amount == str(deposit - 5 * PRICE)
    assert escrow.functions.channels(channel_id).call() == [5 * PRICE, 5 * PRICE]
    assert dev.usdc_balance(payer.address) == 1_000_000 - 5 * PRICE
    assert escrow.functions.refundNonce(channel_id).call() == 1

    # One deposit, one claim, one settle, one claim + refund: a block each on automine.
    assert dev.w3.eth.block_number == first_block + 4
    assert dev.eth_balance(payer.address) == 0


def test_stock_x402_client_and_facilitator_deposit_through_permit2(
    dev: DevChain, escrow: Contract, parties: Parties
) -> None:
    """The same stock pair with `assetTransferMethod: permit2`: the facilitator checks the
    payer's Permit2 allowance and signature, then deposits through the Permit2 collector."""
    requirements = batch_requirements(dev, parties, assetTransferMethod="permit2")
    offer = PaymentRequired(
        accepts=[requirements], resource=ResourceInfo(url="http://engram.test/v1/recall")
    )
    payer = account_with_gas(dev, usdc=1_000_000)
    client = x402ClientSync().register(
        dev.network, BatchSettlementEvmScheme(EthAccountSigner(payer))
    )
    facilitator = x402FacilitatorSync().register(
        [dev.network],
        BatchSettlementEvmFacilitator(
            FacilitatorWeb3Signer(private_key=dev.relayer.key.hex(), rpc_url=dev.rpc_url),
            authorizer_signer=LocalAuthorizerSigner(parties.authorizer),
        ),
    )
    opening = client.create_payment_payload(offer)
    assert isinstance(opening, PaymentPayload)
    assert "permit2Authorization" in opening.payload["deposit"]["authorization"]

    refused = facilitator.verify(opening, requirements)
    assert not refused.is_valid
    assert refused.invalid_reason == "invalid_batch_settlement_evm_permit2_allowance_required"

    usdc = dev.w3.eth.contract(address=token(dev), abi=token_abi())
    transact(dev, payer, usdc.functions.approve(PERMIT2_ADDRESS, 2**256 - 1))
    verified = facilitator.verify(opening, requirements)
    assert verified.is_valid, verified
    settled = facilitator.settle(opening, requirements)
    assert settled.success, settled
    deposit = int(opening.payload["deposit"]["amount"])
    channel_id = opening.payload["voucher"]["channelId"]
    assert escrow.functions.channels(channel_id).call() == [deposit, 0]
    assert dev.usdc_balance(payer.address) == 1_000_000 - deposit
