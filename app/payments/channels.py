"""x402 payment channels (the batch-settlement scheme): a deposit settled once, then vouchers.

Offered by default when Engram settles itself (a relayer key over an RPC URL), or with
`ENGRAM_X402_SCHEMES=exact,batch-settlement`; `exact` opts out. The claimer (claimer.py) claims
the vouchers on chain later. The protocol is x402's: its server scheme makes the offer
(offers.py), its payload types and checks read the proof (proofs.py, and the named checks
below), its facilitator verifies and settles deposits in process with the relayer key. What is
Engram's is where the channel's state lives: in PostgreSQL, in the request's transaction.

- A deposit (a channel's first call, or a top-up) is verified and settled on chain by x402's
  `BatchSettlementEvmFacilitator` before the request commits, as `exact` is.
- A voucher (every later call) is accepted with no on-chain step: the channel row is locked
  (`SELECT … FOR UPDATE`), so vouchers on one channel take turns across instances; the voucher
  and the channel's new charged total are written in the request's transaction, and commit with
  the work or roll back with it.
- The answer's `PAYMENT-RESPONSE` carries the channel's charged total (`channelState`), which is
  what x402's client bases its next voucher on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
from eth_account import Account
from x402 import x402FacilitatorSync
from x402.http.utils import encode_payment_response_header
from x402.mechanisms.evm.batch_settlement.authorizer_signer import LocalAuthorizerSigner
from x402.mechanisms.evm.batch_settlement.constants import SCHEME_BATCH_SETTLEMENT
from x402.mechanisms.evm.batch_settlement.errors import (
    ERR_CHANNEL_NOT_FOUND,
    ERR_CUMULATIVE_AMOUNT_MISMATCH,
    ERR_CUMULATIVE_EXCEEDS_BALANCE,
    ERR_INVALID_VOUCHER_SIGNATURE,
    ERR_NETWORK_MISMATCH,
)
from x402.mechanisms.evm.batch_settlement.facilitator import BatchSettlementEvmFacilitator
from x402.mechanisms.evm.batch_settlement.facilitator.utils import (
    validate_channel_config,
    verify_batch_settlement_voucher_typed_data,
)
from x402.mechanisms.evm.batch_settlement.server import (
    BatchSettlementEvmScheme,
    BatchSettlementEvmSchemeServerConfig,
)
from x402.mechanisms.evm.batch_settlement.server.utils import (
    read_channel_state_extra,
    read_extra_number,
    read_extra_string,
)
from x402.mechanisms.evm.batch_settlement.types import ChannelConfig
from x402.mechanisms.evm.batch_settlement.utils import channel_id_binding_error
from x402.mechanisms.evm.utils import get_evm_chain_id
from x402.schemas import PaymentRequirements, SettleResponse

from app.config import X402Settings
from app.core.errors import Conflict, ReplayedResponse
from app.infra import metrics
from app.payments import repository
from app.payments.facilitators import ResyncingWeb3Signer
from app.payments.offers import Offer
from app.payments.proofs import ChannelProof, PaymentRejected

# Engram's own refusal for a channel whose payer finished withdrawing (no x402 code names it).
ERR_CHANNEL_WITHDRAWN = "invalid_batch_settlement_evm_channel_withdrawn"


@dataclass(frozen=True)
class ChannelCharge:
    """A channel payment accepted for one request, written when it settles (before commit)."""

    proof: ChannelProof
    offer: Offer
    fingerprint: bytes
    charged_before: int  # the channel's charged total when its row was locked (0: a new one)
    channel: asyncpg.Record | None = None  # the locked row (None: a deposit opening it)

    @property
    def requirements(self) -> PaymentRequirements:
        return self.proof.payload.accepted

    @property
    def price(self) -> int:
        """What this call adds to the channel's charged total. A voucher may sign for more (as
        x402's server scheme, the charged total moves by the price; the signed amount is the
        ceiling a claim may take)."""
        return self.offer.amount

    @property
    def charged_after(self) -> int:
        return self.charged_before + self.price


# ---- named checks: each refuses with its own x402 reason, before any work or write -----------


def check_channel_network(proof: ChannelProof, offer: Offer) -> None:
    if proof.claimed_network != offer.network.caip2:
        raise PaymentRejected(
            ERR_NETWORK_MISMATCH,
            f"The channel payment is for network {proof.claimed_network!r}; this server takes"
            f" {offer.network.caip2!r}",
        )


def check_channel_terms(proof: ChannelProof, requirements: PaymentRequirements) -> None:
    """The channel id is the hash of its config on this chain, and the config names Engram's
    receiver, receiver authorizer, token and withdraw delay (x402's own checks)."""
    extra = requirements.extra or {}
    reason = _terms_reason(
        dataclasses.astuple(proof.config), proof.channel_id, str(requirements.network),
        requirements.pay_to, requirements.asset, str(extra.get("receiverAuthorizer") or ""),
        extra.get("withdrawDelay"),
    )  # fmt: skip
    if reason:
        raise PaymentRejected(reason, "The channel is not one this server's offer opens")


# A channel's terms never change (its id is the hash of its config), and a payer sends the same
# ones with every voucher: x402's checks (two keccak hashes of the config, ~0.7 ms) run once per
# channel and offer, then are looked up. Bounded: the channels paying this instance lately.
CHANNEL_TERMS_KEPT = 4096


@functools.lru_cache(maxsize=CHANNEL_TERMS_KEPT)
def _terms_reason(
    config: tuple[Any, ...], channel_id: str, network: str, pay_to: str, asset: str,
    receiver_authorizer: str, withdraw_delay: Any,
) -> str | None:  # fmt: skip
    channel = ChannelConfig(*config)
    offered = PaymentRequirements(
        scheme=SCHEME_BATCH_SETTLEMENT, network=network, asset=asset, amount="0", pay_to=pay_to,
        max_timeout_seconds=0,
        extra={"receiverAuthorizer": receiver_authorizer or None,
               **({"withdrawDelay": withdraw_delay} if withdraw_delay is not None else {})},
    )  # fmt: skip
    return channel_id_binding_error(channel, channel_id, network) or validate_channel_config(
        channel, channel_id, offered
    )


def check_raises_total(proof: ChannelProof, charged: int, price: int) -> None:
    if proof.cumulative - charged < price:
        raise PaymentRejected(
            ERR_CUMULATIVE_AMOUNT_MISMATCH,
            f"The voucher's cumulative amount {proof.cumulative} does not raise the channel's"
            f" charged total {charged} by this call's price {price}",
        )


def corrective_snapshot(channel: Mapping[str, Any]) -> str:
    """The channel as Engram holds it, in x402's corrective-402 extras (as its server scheme's
    `handle_enrich_payment_required_response` makes them): a client that lost its own count of
    the channel (a restart, another process) resyncs from it and signs the next voucher right.
    The highest voucher's signature lets it check the figures are its own."""
    return json.dumps(
        {
            "channelState": {
                "channelId": channel["channel_id"],
                **_state_of(channel),
                "chargedCumulativeAmount": str(int(channel["charged"])),
            },
            "voucherState": {
                "signedMaxClaimable": str(int(channel["signed_max_claimable"])),
                "signature": channel["signature"],
            },
        }
    )


def check_raises_total_of(
    proof: ChannelProof, channel: Mapping[str, Any] | None, price: int
) -> None:
    """check_raises_total against a known channel, refusing with its snapshot (a corrective 402)."""
    charged = int(channel["charged"]) if channel is not None else 0
    try:
        check_raises_total(proof, charged, price)
    except PaymentRejected as rejected:
        if channel is None:
            raise
        raise PaymentRejected(
            rejected.reason, rejected.message, corrective_snapshot(channel)
        ) from None


def check_within_deposit(proof: ChannelProof, channel: asyncpg.Record) -> None:
    if proof.cumulative > int(channel["balance"]):
        raise PaymentRejected(
            ERR_CUMULATIVE_EXCEEDS_BALANCE,
            f"The voucher's cumulative amount {proof.cumulative} is above the channel's deposit"
            f" {channel['balance']}; deposit more",
        )


def check_not_withdrawn(channel: Mapping[str, Any], now: int, margin: int) -> None:
    """A withdrawal whose delay has passed (as last read from the chain) can be finalised at
    any moment: a voucher then may never be claimable. `margin` before that end, a voucher is
    refused too: the claimer looks at the chain once a run, and a voucher accepted after its
    last look before the end would be lost to the payer's finalise."""
    requested = int(channel["withdraw_requested_at"])
    if requested and now >= requested + int(channel["withdraw_delay"]) - margin:
        raise PaymentRejected(
            ERR_CHANNEL_WITHDRAWN,
            "The channel's withdrawal is final or about to be; open a new channel",
        )


def check_signed(proof: ChannelProof, chain_id: int, signer: Any) -> None:
    """Signed by the channel's payerAuthorizer (ECDSA, no chain), or, for a channel without one,
    by the payer itself through EIP-1271 (a chain read through `signer`)."""
    if not verify_batch_settlement_voucher_typed_data(
        signer=signer,
        channel_id=proof.channel_id,
        max_claimable_amount=str(proof.cumulative),
        payer_authorizer=proof.config.payer_authorizer,
        payer=proof.config.payer,
        signature=proof.signature,
        chain_id=chain_id,
    ):
        raise PaymentRejected(
            ERR_INVALID_VOUCHER_SIGNATURE,
            "The voucher is signed by neither the channel's payer nor its payerAuthorizer",
        )


# ---- the channels ----------------------------------------------------------------------------


class Channels:
    """x402's batch-settlement server scheme (the offer) and facilitator (deposits), with the
    relayer key as both the facilitator's signer and the receiver's authorizer."""

    def __init__(
        self,
        pay_to: str,
        relayer_key: str,
        rpc_url: str,
        network_caip2: str,
        settle_timeout_seconds: float,
        withdraw_margin_seconds: int = 0,
    ) -> None:
        self.withdraw_margin_seconds = withdraw_margin_seconds
        authorizer = LocalAuthorizerSigner(Account.from_key(relayer_key))
        self.scheme = BatchSettlementEvmScheme(
            pay_to, BatchSettlementEvmSchemeServerConfig(receiver_authorizer_signer=authorizer)
        )
        self.signer = ResyncingWeb3Signer(
            private_key=relayer_key,
            rpc_url=rpc_url,
            confirmation_timeout_seconds=settle_timeout_seconds,
        )
        self.chain_id = get_evm_chain_id(network_caip2)
        self._facilitator = x402FacilitatorSync()
        self._facilitator.register(
            [network_caip2],
            BatchSettlementEvmFacilitator(self.signer, authorizer_signer=authorizer),
        )

    async def accept(
        self, conn: asyncpg.Connection, offer: Offer, proof: ChannelProof, fingerprint: bytes
    ) -> ChannelCharge:
        """The channel payment checked and held: the channel row stays locked by the request's
        transaction until it commits or rolls back. Raises PaymentRejected, or ReplayedResponse
        through the caller's ledger rules."""
        requirements = proof.payload.accepted
        check_channel_network(proof, offer)
        check_channel_terms(proof, requirements)
        if proof.kind == "deposit":
            # a new channel has no row to lock yet: its deposits take turns on its key
            await repository.lock_channel_key(conn, proof.payer, proof.channel_id)
        channel = await repository.lock_channel(conn, proof.payer, proof.channel_id)
        charged = int(channel["charged"]) if channel is not None else 0
        charge = ChannelCharge(proof, offer, fingerprint, charged, channel)
        await _check_identifier(conn, proof, fingerprint)
        if channel is not None:
            await _replay_if_served(conn, charge)
        if proof.kind == "voucher":
            if channel is None:
                raise PaymentRejected(
                    ERR_CHANNEL_NOT_FOUND, "No deposit opened this channel here; deposit first"
                )
            check_raises_total_of(proof, channel, offer.amount)
            check_within_deposit(proof, channel)
            check_not_withdrawn(channel, int(time.time()), self.withdraw_margin_seconds)
            if int(proof.config.payer_authorizer, 16) == 0:  # EIP-1271: a chain read
                await asyncio.to_thread(check_signed, proof, self.chain_id, self.signer)
            else:
                check_signed(proof, self.chain_id, self.signer)
            return charge
        check_raises_total_of(proof, channel, offer.amount)
        verdict = await asyncio.to_thread(self._facilitator.verify, proof.payload, requirements)
        if not verdict.is_valid:
            reason = verdict.invalid_reason or "invalid_payload"
            raise PaymentRejected(reason, f"Deposit rejected: {verdict.invalid_message or reason}")
        return charge

    async def settle(
        self,
        conn: asyncpg.Connection,
        charge: ChannelCharge,
        endpoint: str,
        request_id: str,
        response: tuple[int, bytes] | None,
    ) -> SettleResponse:
        """A deposit settles on chain first; then the voucher and the channel's charged total are
        written in the request's transaction. The receipt is what the payer's client reads."""
        proof = charge.proof
        transaction = ""
        channel_state: dict[str, Any] = {}
        if proof.kind == "deposit":
            receipt = await asyncio.to_thread(
                self._facilitator.settle, proof.payload, charge.requirements
            )
            if not receipt.success:
                raise PaymentRejected(
                    receipt.error_reason or "unexpected_settle_error",
                    f"The deposit could not be settled: {receipt.error_message or ''}",
                )
            transaction = receipt.transaction
            channel_state = read_channel_state_extra(receipt.extra) or {}
            mined_in = await asyncio.to_thread(self.signer.mined_in, transaction)
            await repository.open_or_top_up(
                conn, self._opened(charge, channel_state, transaction, mined_in)
            )
        elif charge.channel is not None:
            channel_state = _state_of(charge.channel)
        await repository.charge_voucher(
            conn,
            repository.AcceptedVoucher(
                wallet=proof.payer,
                channel_id=proof.channel_id,
                cumulative=proof.cumulative,
                charged_after=charge.charged_after,
                amount=charge.price,
                signature=proof.signature,
                endpoint=endpoint,
                request_id=request_id,
                request_fingerprint=charge.fingerprint,
                payment_identifier=proof.payment_id,
                response_status=response[0] if response else None,
                response_body=response[1] if response else None,
            ),
        )
        metrics.X402_CHANNEL_PAYMENTS.labels(proof.kind).inc()
        return channel_receipt(charge, transaction, channel_state)

    def _opened(
        self, charge: ChannelCharge, state: dict[str, Any], transaction: str, mined_in: int
    ) -> repository.OpenedChannel:
        proof, config = charge.proof, charge.proof.config
        return repository.OpenedChannel(
            wallet=proof.payer,
            channel_id=proof.channel_id,
            network=charge.offer.network.caip2,
            asset=config.token,
            receiver=config.receiver,
            receiver_authorizer=config.receiver_authorizer,
            payer_authorizer=config.payer_authorizer,
            withdraw_delay=config.withdraw_delay,
            salt=config.salt.lower(),
            balance=int(read_extra_string(state, "balance", "0")),
            total_claimed=int(read_extra_string(state, "totalClaimed", "0")),
            charged=charge.charged_before,
            signed_max_claimable=charge.charged_before,
            signature=charge.channel["signature"] if charge.channel else "0x",
            withdraw_requested_at=read_extra_number(state, "withdrawRequestedAt", 0),
            refund_nonce=read_extra_number(state, "refundNonce", 0),
            deposit_tx=transaction or None,
            state_block=mined_in,
        )


async def _check_identifier(
    conn: asyncpg.Connection, proof: ChannelProof, fingerprint: bytes
) -> None:
    """x402's payment-identifier, as for `exact` (service.py): an id already used with another
    voucher or request is a 409; with the same ones, the replay below answers."""
    if proof.payment_id is None:
        return
    row = await repository.find_voucher_by_identifier(conn, proof.payer, proof.payment_id)
    if row is None:
        return
    same_voucher = (row["channel_id"], int(row["cumulative"])) == (
        proof.channel_id, proof.cumulative)  # fmt: skip
    if not same_voucher or row["request_fingerprint"] != fingerprint:
        raise Conflict(
            "This payment identifier was already used with another payment or request",
            {"reason": "payment_identifier_conflict"},
        )


async def _replay_if_served(conn: asyncpg.Connection, charge: ChannelCharge) -> None:
    """The same voucher resent with the same request (a client that lost the answer) gets its
    first answer again, charged once; with another request it is refused as not raising the
    channel's total."""
    proof = charge.proof
    row = await repository.find_voucher(conn, proof.payer, proof.channel_id, proof.cumulative)
    if row is None or row["request_fingerprint"] != charge.fingerprint:
        return
    if row["response_body"] is None:
        return
    first = ChannelCharge(
        proof, charge.offer, charge.fingerprint, int(row["charged_after"]) - int(row["amount"]),
        charge.channel,
    )  # fmt: skip
    assert charge.channel is not None
    receipt = channel_receipt(first, "", _state_of(charge.channel))
    raise ReplayedResponse(
        row["response_status"],
        bytes(row["response_body"]),
        {
            "PAYMENT-RESPONSE": encode_payment_response_header(receipt),
            "Cache-Control": "private, no-store",
            "X-Idempotent-Replay": "true",
        },
    )


def _state_of(channel: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "balance": str(int(channel["balance"])),
        "totalClaimed": str(int(channel["total_claimed"])),
        "withdrawRequestedAt": int(channel["withdraw_requested_at"]),
        "refundNonce": str(channel["refund_nonce"]),
    }


def channel_receipt(
    charge: ChannelCharge, transaction: str, state: dict[str, Any]
) -> SettleResponse:
    """The receipt x402's client expects (as its server scheme's `before_settle` and
    `enrich_settlement_response` make it): the channel's new charged total and this call's
    charge."""
    proof = charge.proof
    return SettleResponse(
        success=True,
        payer=proof.payer,
        transaction=transaction,
        network=charge.offer.network.caip2,
        amount="",
        extra={
            "channelState": {
                "channelId": proof.channel_id,
                **state,
                "chargedCumulativeAmount": str(charge.charged_after),
            },
            "chargedAmount": str(charge.price),
        },
    )


def build_channels(
    x402: X402Settings, network_caip2: str, settle_timeout_seconds: float = 30
) -> Channels | None:
    """Payment channels when ENGRAM_X402_SCHEMES asks for them: deposits are settled, and the
    receiver's authorizer signs, with the relayer key over the RPC URL."""
    if not x402.channels:
        return None
    if not (x402.pay_to and x402.relayer_key and x402.rpc_url):
        raise SystemExit(
            "ENGRAM_X402_SCHEMES=exact,batch-settlement needs ENGRAM_X402_PAY_TO,"
            " ENGRAM_X402_RPC_URL and ENGRAM_X402_RELAYER_KEY"
        )
    return Channels(
        x402.pay_to, x402.relayer_key, x402.rpc_url, network_caip2, settle_timeout_seconds,
        # two claimer runs: a withdrawal seen on one run is claimed on it or the next
        withdraw_margin_seconds=2 * x402.claim_every_seconds,
    )  # fmt: skip
