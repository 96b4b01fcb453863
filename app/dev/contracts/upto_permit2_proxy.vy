# pragma version ~=0.4.3
"""
@title x402's upto Permit2 proxy, the part the `upto` scheme's facilitator calls, for the dev chain
@notice `settle`: move `amount` (at most what the payer's Permit2 signature permits) from the
        payer to the witness's `to`, through Permit2's `permitWitnessTransferFrom`. The payer's
        signature names this proxy as the spender and binds a witness {to, facilitator,
        validAfter}; only the named facilitator may settle, and not before `validAfter`. The
        facilitator chooses the amount (the call's real cost), never above the signed maximum.
@dev    DEVELOPMENT ONLY, installed with `anvil_setCode` at x402's deterministic address for the
        proxy (X402_UPTO_PERMIT2_PROXY_ADDRESS). Written from the scheme's published ABI
        (`X402_UPTO_PERMIT2_PROXY_ABI` in the `x402` package), witness types and error names.
        Permit2 is a constant (its canonical address) rather than an immutable: code placed by
        `anvil_setCode` runs no constructor. `settleWithPermit` (the EIP-2612 gas-sponsoring
        path) is left out: the dev USDC has no EIP-2612 `permit`.
"""

MAX_SIGNATURE_LEN: constant(uint256) = 1024
MAX_WITNESS_TYPE_LEN: constant(uint256) = 1024

PERMIT2: constant(address) = 0x000000000022D473030F116dDEE9F6B43aC78BA3

WITNESS_TYPE_STRING: public(constant(String[MAX_WITNESS_TYPE_LEN])) = (
    "Witness witness)TokenPermissions(address token,uint256 amount)"
    "Witness(address to,address facilitator,uint256 validAfter)"
)
WITNESS_TYPEHASH: public(constant(bytes32)) = keccak256(
    "Witness(address to,address facilitator,uint256 validAfter)"
)


struct TokenPermissions:
    token: address
    amount: uint256

struct PermitTransferFrom:
    permitted: TokenPermissions
    nonce: uint256
    deadline: uint256

struct SignatureTransferDetails:
    to: address
    requestedAmount: uint256

struct Witness:
    to: address
    facilitator: address
    validAfter: uint256


interface ISignatureTransfer:
    def permitWitnessTransferFrom(
        permit: PermitTransferFrom,
        transferDetails: SignatureTransferDetails,
        owner: address,
        witness: bytes32,
        witnessTypeString: String[MAX_WITNESS_TYPE_LEN],
        signature: Bytes[MAX_SIGNATURE_LEN],
    ): nonpayable


event Settled:
    pass


AMOUNT_EXCEEDS_PERMITTED: constant(Bytes[4]) = method_id("AmountExceedsPermitted()")
UNAUTHORIZED_FACILITATOR: constant(Bytes[4]) = method_id("UnauthorizedFacilitator()")
INVALID_AMOUNT: constant(Bytes[4]) = method_id("InvalidAmount()")
INVALID_OWNER: constant(Bytes[4]) = method_id("InvalidOwner()")
INVALID_DESTINATION: constant(Bytes[4]) = method_id("InvalidDestination()")
PAYMENT_TOO_EARLY: constant(Bytes[4]) = method_id("PaymentTooEarly()")


@view
@external
def PERMIT2_ADDRESS() -> address:
    return PERMIT2


@external
@nonreentrant
def settle(
    permit: PermitTransferFrom,
    amount: uint256,
    owner: address,
    witness: Witness,
    signature: Bytes[MAX_SIGNATURE_LEN],
):
    """
    @notice Settle `amount` of the permitted maximum: checked against the permit, the caller,
            the time and the parties, then moved by Permit2, which checks the signature and
            spends the nonce (so a permit settles once, whatever the amount).
    """
    if amount > permit.permitted.amount:
        raw_revert(AMOUNT_EXCEEDS_PERMITTED)
    if msg.sender != witness.facilitator:
        raw_revert(UNAUTHORIZED_FACILITATOR)
    if amount == 0:
        raw_revert(INVALID_AMOUNT)
    if owner == empty(address):
        raw_revert(INVALID_OWNER)
    if witness.to == empty(address):
        raw_revert(INVALID_DESTINATION)
    if block.timestamp < witness.validAfter:
        raw_revert(PAYMENT_TOO_EARLY)
    witness_hash: bytes32 = keccak256(
        abi_encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter)
    )
    extcall ISignatureTransfer(PERMIT2).permitWitnessTransferFrom(
        permit,
        SignatureTransferDetails(to=witness.to, requestedAmount=amount),
        owner,
        witness_hash,
        WITNESS_TYPE_STRING,
        signature,
    )
    log Settled()
