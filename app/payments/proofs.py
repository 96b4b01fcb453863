"""Payment proofs as clients send them, read and checked against Engram's own offer.

`PAYMENT-SIGNATURE` (x402 v2) and `X-PAYMENT` (v1) both carry base64 JSON. A v1 proof is
normalised to v2 around the same signed authorization, so one verify/settle path serves both.
Each check is a named function raising `PaymentRejected` with the x402 reason code; the client's
own copy of the requirements (`accepted`) is never trusted, only compared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from x402.extensions.payment_identifier import PAYMENT_IDENTIFIER, validate_payment_identifier
from x402.mechanisms.evm.batch_settlement.errors import (
    ERR_NETWORK_MISMATCH as ERR_CHANNEL_NETWORK_MISMATCH,
)
from x402.mechanisms.evm.batch_settlement.errors import ERR_VOUCHER_PAYLOAD
from x402.mechanisms.evm.batch_settlement.types import (
    ChannelConfig,
    is_deposit_payload,
    is_voucher_payload,
)
from x402.mechanisms.evm.batch_settlement.utils import (
    channel_id_binding_error,
    is_canonical_channel_id,
)
from x402.mechanisms.evm.constants import ERR_NETWORK_MISMATCH
from x402.mechanisms.evm.eip712 import hash_eip3009_authorization
from x402.mechanisms.evm.types import ExactEIP3009Authorization
from x402.mechanisms.evm.verify import verify_eoa_signature
from x402.schemas import PaymentPayload

from app.core.json_input import UnreadableJson, decode_base64_json
from app.payments.network import Network
from app.payments.offers import CHANNEL_SCHEME, SCHEME, Offer

V2_HEADER = "payment-signature"
V1_HEADER = "x-payment"
ADDRESS_RE = re.compile(r"^0x[0-9a-fA-F]{40}$")
NONCE_RE = re.compile(r"^0x[0-9a-fA-F]{64}$")
# A proof as x402's clients build it is about 1 KiB of base64, 3 levels deep (proof, payload,
# authorization), plus the extensions of the 402 it pays, echoed: the route's bazaar declaration
# (discovery.py) adds up to about 7 KiB and 20 levels (a JSON schema of nested types). Room for
# those, none for a document built to exhaust the decoder (tests/payments/test_discovery.py
# checks every paid route's echo fits).
MAX_HEADER_CHARS = 16 * 1024
MAX_HEADER_DEPTH = 32
# x402's facilitator refuses authorizations that expire within 6 s; so does Engram, up front.
MIN_VALIDITY_SECONDS = 6


class PaymentRejected(Exception):
    def __init__(self, reason: str, message: str, corrective: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        # a channel refusal's snapshot of the channel (JSON of x402's `channelState` and
        # `voucherState` extras), which the 402 carries so that the client can resync
        self.corrective = corrective


@dataclass(frozen=True)
class Authorization:
    payer: str  # lower-cased `from`
    pay_to: str
    value: int
    valid_after: int
    valid_before: int
    nonce: str  # 0x + 64 hex, lower-cased


@dataclass(frozen=True)
class Proof:
    version: int
    header: str  # which header carried it
    payload: PaymentPayload  # v2 form, `accepted` set to Engram's own requirements
    authorization: Authorization
    claimed_scheme: str
    claimed_network: str
    payment_id: str | None = None  # x402's payment-identifier extension: an idempotency key


@dataclass(frozen=True)
class ChannelProof:
    """A payment on an x402 channel (batch-settlement): a deposit opening or topping it up, or
    a voucher for the channel's new cumulative total."""

    kind: str  # "deposit" | "voucher"
    header: str
    payload: PaymentPayload  # v2 form, `accepted` set to Engram's own channel requirements
    config: ChannelConfig
    channel_id: str  # 0x + 64 hex, lower-cased
    payer: str  # lower-cased
    cumulative: int  # the voucher's maxClaimableAmount
    signature: str
    claimed_network: str
    payment_id: str | None = None


def decode_proof_json(raw: str) -> dict[str, Any]:
    try:
        data = decode_base64_json(raw, MAX_HEADER_CHARS, MAX_HEADER_DEPTH)
    except UnreadableJson as exc:
        raise PaymentRejected(
            "invalid_payload", f"The payment header is not base64 JSON ({exc})"
        ) from exc
    if not isinstance(data, dict):
        raise PaymentRejected("invalid_payload", "The payment header must hold a JSON object")
    return data


def _authorization(payload: dict[str, Any]) -> Authorization:
    auth = payload.get("authorization")
    if not isinstance(auth, dict) or not isinstance(payload.get("signature"), str):
        raise PaymentRejected(
            "invalid_payload",
            "Only EIP-3009 proofs ({signature, authorization}) are accepted by this server",
        )
    try:
        payer, pay_to, nonce = str(auth["from"]), str(auth["to"]), str(auth["nonce"])
        value, after, before = (int(auth["value"]), int(auth["validAfter"]),
                                int(auth["validBefore"]))  # fmt: skip
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: 1e999
        raise PaymentRejected("invalid_payload", "The authorization is incomplete") from exc
    if not (ADDRESS_RE.match(payer) and ADDRESS_RE.match(pay_to) and NONCE_RE.match(nonce)):
        raise PaymentRejected("invalid_payload", "Malformed address or nonce in the authorization")
    return Authorization(payer.lower(), pay_to.lower(), value, after, before, nonce.lower())


def carries_proof(headers: Mapping[str, str]) -> bool:
    """Whether a request sends a payment (read or refused later, against the offer)."""
    return bool(headers.get(V2_HEADER) or headers.get(V1_HEADER))


def offer_named(network: str, version: int, offer: Offer, others: tuple[Offer, ...]) -> Offer:
    """The offer for the network a proof names (v2: its CAIP-2 id; v1: its x402 v1 name, which
    not every network has); `offer`, the default network's, when it names none of them, which
    its network check then refuses."""
    for candidate in others:
        if version == 2 and network == candidate.network.caip2:
            return candidate
        if version == 1 and candidate.network.v1 and network == candidate.network.name:
            return candidate
    return offer


def read_proof(headers: dict[str, str], offer: Offer, *others: Offer) -> Proof | None:
    """The proof in the request, if any, in v2 form with Engram's own requirements attached:
    those of the offer for the network it names (`offer`, the default network's, or one of
    `others`), found again by `payload.accepted.network`."""
    raw, header = headers.get(V2_HEADER), V2_HEADER
    if not raw:
        raw, header = headers.get(V1_HEADER), V1_HEADER
    if not raw:
        return None
    data = decode_proof_json(raw)
    version = data.get("x402Version", 2 if header == V2_HEADER else 1)
    if type(version) is not int or version not in (1, 2):  # bool is no version
        raise PaymentRejected("invalid_x402_version", f"x402Version {version!r} is not supported")
    inner = data.get("payload")
    if not isinstance(inner, dict):
        raise PaymentRejected("invalid_payload", "The proof has no payload object")
    if version == 2:
        accepted = data.get("accepted")
        accepted = accepted if isinstance(accepted, dict) else {}
        scheme, network = str(accepted.get("scheme", "")), str(accepted.get("network", ""))
    else:
        scheme, network = str(data.get("scheme", "")), str(data.get("network", ""))
    offer = offer_named(network, version, offer, others)
    try:
        # Engram's own resource and bazaar declaration, never the client's echo of them: what
        # the facilitator is handed is what a catalogue lists
        payload = PaymentPayload(
            payload=inner,
            accepted=offer.requirements(),
            resource=offer.resource(),
            extensions=offer.discovery_extensions() or None,
        )
    except ValidationError as exc:
        raise PaymentRejected("invalid_payload", "The proof's payload is malformed") from exc
    payment_id = payment_id_of(data.get("extensions"))
    return Proof(version, header, payload, _authorization(inner), scheme, network, payment_id)


def read_channel_proof(
    headers: Mapping[str, str], offer: Offer, *others: Offer
) -> ChannelProof | None:
    """The request's proof when it pays on a channel (a v2 proof whose `accepted.scheme` is
    batch-settlement); None for any other proof, which the `exact` path reads. Its shape is
    checked with x402's own payload discriminators; its requirements are the channel offer of
    the network it names (found again by `payload.accepted.network`)."""
    raw = headers.get(V2_HEADER)
    if not raw:
        return None
    data = decode_proof_json(raw)
    accepted = data.get("accepted")
    if not isinstance(accepted, dict) or accepted.get("scheme") != CHANNEL_SCHEME:
        return None
    if data.get("x402Version") != 2:
        raise PaymentRejected("invalid_x402_version", "Payment channels are x402 v2 only")
    offer = offer_named(str(accepted.get("network", "")), 2, offer, others)
    requirements = offer.channel_requirements()
    assert requirements is not None  # channels are on: read only then
    inner = data.get("payload")
    if not isinstance(inner, dict) or not (is_deposit_payload(inner) or is_voucher_payload(inner)):
        raise PaymentRejected(
            ERR_VOUCHER_PAYLOAD, "The channel payment is neither a deposit nor a voucher"
        )
    try:
        config = ChannelConfig.from_dict(inner["channelConfig"])
        voucher = inner["voucher"]
        channel_id, cumulative = str(voucher["channelId"]), int(voucher["maxClaimableAmount"])
        signature, payer = str(voucher["signature"]), str(config.payer)
        payload = PaymentPayload(
            payload=inner,
            accepted=requirements,
            resource=offer.resource(),
            extensions=offer.discovery_extensions() or None,
        )
    except (KeyError, TypeError, ValueError, OverflowError, ValidationError) as exc:
        raise PaymentRejected(ERR_VOUCHER_PAYLOAD, "The channel payment is malformed") from exc
    fields = (config.payer, config.payer_authorizer, config.receiver, config.receiver_authorizer,
              config.token)  # fmt: skip
    if not (
        is_canonical_channel_id(channel_id)
        and all(isinstance(f, str) and ADDRESS_RE.match(f) for f in fields)
        and isinstance(config.salt, str) and NONCE_RE.match(config.salt)
        and 0 < cumulative < 2**256
    ):  # fmt: skip
        raise PaymentRejected(ERR_VOUCHER_PAYLOAD, "Malformed channel, address or amount")
    return ChannelProof(
        kind="deposit" if is_deposit_payload(inner) else "voucher",
        header=V2_HEADER,
        payload=payload,
        config=config,
        channel_id=channel_id.lower(),
        payer=payer.lower(),
        cumulative=cumulative,
        signature=signature,
        claimed_network=str(accepted.get("network", "")),
        payment_id=payment_id_of(data.get("extensions")),
    )


def payment_id_of(extensions: Any) -> str | None:
    """The payment-identifier extension's id, checked with x402's own validation; None when the
    proof carries none.

    Checked on Engram's terms only: the `schema` a client sends beside its id is dropped, never
    run. x402's validation would apply it with jsonschema, in the event loop, for anyone (a
    backtracking `pattern` such as `^(a+)+$` against a 40-character id takes hours). The rules
    Engram declares (a boolean `required`; an id of 16-128 letters, digits, `_` or `-`) are the
    ones x402's validation checks without a schema."""
    if not isinstance(extensions, dict) or not extensions.get(PAYMENT_IDENTIFIER):
        return None
    extension = extensions[PAYMENT_IDENTIFIER]
    if isinstance(extension, dict):
        extension = {k: v for k, v in extension.items() if k != "schema"}
    result = validate_payment_identifier(extension)
    if not result.valid:
        raise PaymentRejected(
            "invalid_payment_identifier",
            f"The payment-identifier extension is invalid: {'; '.join(result.errors)}",
        )
    info = extension.get("info") if isinstance(extension, dict) else None
    payment_id = info.get("id") if isinstance(info, dict) else None
    return payment_id if isinstance(payment_id, str) else None


# ---- named checks, against Engram's offer only ----------------------------------------------


def check_scheme(proof: Proof, offer: Offer) -> None:
    if proof.claimed_scheme != SCHEME:
        raise PaymentRejected(
            "unsupported_scheme", f"Scheme {proof.claimed_scheme!r} is not offered; use 'exact'"
        )


def check_network(proof: Proof, offer: Offer) -> None:
    expected = offer.network.caip2 if proof.version == 2 else offer.network.name
    if proof.claimed_network != expected:
        raise PaymentRejected(
            "invalid_network",
            f"The proof is for network {proof.claimed_network!r}; this server takes {expected!r}",
        )


def check_pay_to(proof: Proof, offer: Offer) -> None:
    if proof.authorization.pay_to != offer.pay_to.lower():
        raise PaymentRejected(
            "invalid_exact_evm_payload_recipient_mismatch",
            f"The authorization pays {proof.authorization.pay_to}, not {offer.pay_to}",
        )


def check_amount(proof: Proof, offer: Offer) -> None:
    if proof.authorization.value != offer.amount:
        raise PaymentRejected(
            "invalid_exact_evm_payload_authorization_value_mismatch",
            f"The authorization is for {proof.authorization.value} units; this call costs exactly"
            f" {offer.amount} (${offer.price_usd})",
        )


def check_time_window(proof: Proof, now: int) -> None:
    if proof.authorization.valid_after > now:
        raise PaymentRejected(
            "invalid_exact_evm_payload_authorization_valid_after",
            "The authorization is not valid yet (validAfter is in the future)",
        )
    if proof.authorization.valid_before < now + MIN_VALIDITY_SECONDS:
        raise PaymentRejected(
            "invalid_exact_evm_payload_authorization_valid_before",
            "The authorization has expired or expires within seconds (validBefore)",
        )


def check_against_offer(
    proof: Proof, offer: Offer, now: int, others: tuple[Offer, ...] = ()
) -> None:
    """`others`: the same call's offers on the server's other networks; a proof made for one of
    them is refused as such before its payee or amount (which may differ there) is compared."""
    check_scheme(proof, offer)
    check_network(proof, offer)
    check_signed_for_network(proof, offer, others)
    check_pay_to(proof, offer)
    check_amount(proof, offer)
    check_time_window(proof, now)


# ---- with several networks: a payment made for one of them, naming another -----------------


def signed_on(proof: Proof, network: Network) -> bool:
    """Whether the authorization's signature recovers to its payer under `network`'s token
    domain (EIP-712: token name and version, chain id, token address), by x402's own hash and
    recovery. A contract wallet's signature recovers under none."""
    auth = proof.authorization
    digest = hash_eip3009_authorization(
        ExactEIP3009Authorization(
            auth.payer, auth.pay_to, str(auth.value), str(auth.valid_after),
            str(auth.valid_before), auth.nonce,
        ),
        network.chain_id, network.asset, network.asset_name, network.asset_version,
    )  # fmt: skip
    try:
        signature = bytes.fromhex(str(proof.payload.payload["signature"]).removeprefix("0x"))
        return verify_eoa_signature(digest, signature, auth.payer)
    except ValueError:  # not a 65-byte ECDSA signature: a contract wallet's, or garbage
        return False


def check_signed_for_network(proof: Proof, offer: Offer, others: tuple[Offer, ...]) -> None:
    """An authorization signed for another of this server's networks than the one its proof
    names is refused as such, before anything is verified or settled (the named network's
    facilitator would only see a bad signature). One signed for none is left to the
    facilitator to judge."""
    if not others or signed_on(proof, offer.network):
        return
    for other in others:
        if signed_on(proof, other.network):
            raise PaymentRejected(
                ERR_NETWORK_MISMATCH,
                f"The authorization is signed for {other.network.caip2}, but the proof names"
                f" {offer.network.caip2}; pay the {other.network.caip2} offer as it is",
            )


def check_channel_for_network(proof: ChannelProof, offer: Offer, others: tuple[Offer, ...]) -> None:
    """A channel on another of this server's networks than the one its payment names (a
    channel's id is the hash of its config and chain) is refused as such."""
    if not channel_id_binding_error(proof.config, proof.channel_id, offer.network.caip2):
        return
    for other in others:
        if not channel_id_binding_error(proof.config, proof.channel_id, other.network.caip2):
            raise PaymentRejected(
                ERR_CHANNEL_NETWORK_MISMATCH,
                f"The channel is on {other.network.caip2}, but the payment names"
                f" {offer.network.caip2}; pay the {other.network.caip2} offer as it is",
            )
