# pragma version ~=0.4.3
"""
@title Permit2 deposit collector for the dev chain's batch-settlement escrow
@notice Pulls a channel deposit straight from the payer into the escrow with Permit2's
        `permitWitnessTransferFrom`, the witness binding the signature to one channel
        (DepositWitness(bytes32 channelId)). For tokens without EIP-3009; the payer has
        approved Permit2 beforehand, or sends an EIP-2612 permit along, which is tried first
        and whose failure is only logged. Written for the dev chain from the `x402` Python
        package's interface for this collector: `collectorData` is
        abi.encode(uint256 nonce, uint256 deadline, bytes permit2Signature,
        bytes eip2612Permit), the last either empty or
        abi.encode(uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s).
@dev    DEVELOPMENT ONLY. No constructor: the runtime code is placed at the scheme's
        deterministic collector address with `anvil_setCode`, then `initialize` stores the
        escrow's and Permit2's addresses once.
"""

# The escrow passes at most this much collector data (as for the ERC-3009 collector).
MAX_COLLECTOR_DATA_LEN: constant(uint256) = 1024
MAX_SIGNATURE_LEN: constant(uint256) = 512
EIP2612_PERMIT_LEN: constant(uint256) = 5 * 32
MAX_REVERT_LEN: constant(uint256) = 256
MAX_REASON_LEN: constant(uint256) = 160  # what an Error(string) in MAX_REVERT_LEN bytes holds

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


interface ISignatureTransfer:
    def permitWitnessTransferFrom(
        permit: PermitTransferFrom,
        transferDetails: SignatureTransferDetails,
        owner: address,
        witness: bytes32,
        witnessTypeString: String[128],
        signature: Bytes[MAX_SIGNATURE_LEN],
    ): nonpayable


event EIP2612PermitFailedWithReason:
    token: indexed(address)
    owner: indexed(address)
    reason: String[MAX_REASON_LEN]

event EIP2612PermitFailedWithPanic:
    token: indexed(address)
    owner: indexed(address)
    errorCode: uint256

event EIP2612PermitFailedWithData:
    token: indexed(address)
    owner: indexed(address)
    data: Bytes[MAX_REVERT_LEN]


# EIP-712 encodeType lists referenced structs alphabetically: DepositWitness, TokenPermissions.
DEPOSIT_WITNESS_TYPE_STRING: public(constant(String[128])) = (
    "DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)"
)
DEPOSIT_WITNESS_TYPEHASH: public(constant(bytes32)) = keccak256("DepositWitness(bytes32 channelId)")

ONLY_X402_BATCH_SETTLEMENT: constant(Bytes[4]) = method_id("OnlyX402BatchSettlement()")
INVALID_X402_BATCH_SETTLEMENT_ADDRESS: constant(Bytes[4]) = method_id(
    "InvalidX402BatchSettlementAddress()"
)
INVALID_PERMIT2_ADDRESS: constant(Bytes[4]) = method_id("InvalidPermit2Address()")
PERMIT2612_AMOUNT_MISMATCH: constant(Bytes[4]) = method_id("Permit2612AmountMismatch()")
ERROR_STRING_SELECTOR: constant(bytes4) = 0x08c379a0
PANIC_SELECTOR: constant(bytes4) = 0x4e487b71

# The escrow this collector serves and the Permit2 it uses (set once by initialize).
x402BatchSettlement: public(address)
PERMIT2: public(address)


@external
def initialize(settlement: address, permit2: address):
    """
    @notice Bind the collector to its escrow and to Permit2. Callable once (there is no
            constructor because the code is installed with anvil_setCode).
    """
    assert self.x402BatchSettlement == empty(address), "already initialized"
    if settlement == empty(address):
        raw_revert(INVALID_X402_BATCH_SETTLEMENT_ADDRESS)
    if permit2 == empty(address):
        raw_revert(INVALID_PERMIT2_ADDRESS)
    self.x402BatchSettlement = settlement
    self.PERMIT2 = permit2


@external
def collect(
    payer: address,
    token: address,
    amount: uint256,
    channelId: bytes32,
    collectorData: Bytes[MAX_COLLECTOR_DATA_LEN],
):
    """
    @notice Move `amount` of `token` from `payer` to the escrow through Permit2. Escrow only.
    """
    escrow: address = self.x402BatchSettlement
    if msg.sender != escrow:
        raw_revert(ONLY_X402_BATCH_SETTLEMENT)

    nonce: uint256 = 0
    deadline: uint256 = 0
    signature: Bytes[MAX_SIGNATURE_LEN] = b""
    eip2612_permit: Bytes[EIP2612_PERMIT_LEN] = b""
    nonce, deadline, signature, eip2612_permit = abi_decode(
        collectorData, (uint256, uint256, Bytes[MAX_SIGNATURE_LEN], Bytes[EIP2612_PERMIT_LEN])
    )
    if len(eip2612_permit) > 0:
        self._try_eip2612_permit(payer, token, amount, eip2612_permit)

    extcall ISignatureTransfer(self.PERMIT2).permitWitnessTransferFrom(
        PermitTransferFrom(
            permitted=TokenPermissions(token=token, amount=amount), nonce=nonce, deadline=deadline
        ),
        SignatureTransferDetails(to=escrow, requestedAmount=amount),
        payer,
        keccak256(abi_encode(DEPOSIT_WITNESS_TYPEHASH, channelId)),
        DEPOSIT_WITNESS_TYPE_STRING,
        signature,
    )


@internal
def _try_eip2612_permit(
    payer: address, token: address, amount: uint256, eip2612_permit: Bytes[EIP2612_PERMIT_LEN]
):
    """
    @dev Best effort: a permit that fails (already used, token without permit) is logged and
         the Permit2 transfer still runs, relying on an earlier approval.
    """
    value: uint256 = 0
    permit_deadline: uint256 = 0
    v: uint8 = 0
    r: bytes32 = empty(bytes32)
    s: bytes32 = empty(bytes32)
    value, permit_deadline, v, r, s = abi_decode(
        eip2612_permit, (uint256, uint256, uint8, bytes32, bytes32)
    )
    if value != amount:
        raw_revert(PERMIT2612_AMOUNT_MISMATCH)

    success: bool = False
    response: Bytes[MAX_REVERT_LEN] = b""
    success, response = raw_call(
        token,
        abi_encode(
            payer,
            self.PERMIT2,
            value,
            permit_deadline,
            v,
            r,
            s,
            method_id=method_id("permit(address,address,uint256,uint256,uint8,bytes32,bytes32)"),
        ),
        max_outsize=MAX_REVERT_LEN,
        revert_on_failure=False,
    )
    if success:
        return
    selector: bytes4 = empty(bytes4)
    if len(response) >= 4:
        selector = convert(slice(response, 0, 4), bytes4)
    if selector == ERROR_STRING_SELECTOR and len(response) >= 68:
        reason: String[MAX_REASON_LEN] = abi_decode(
            slice(response, 4, len(response) - 4), String[MAX_REASON_LEN]
        )
        log EIP2612PermitFailedWithReason(token=token, owner=payer, reason=reason)
    elif selector == PANIC_SELECTOR and len(response) == 36:
        code: uint256 = convert(slice(response, 4, 32), uint256)
        log EIP2612PermitFailedWithPanic(token=token, owner=payer, errorCode=code)
    else:
        log EIP2612PermitFailedWithData(token=token, owner=payer, data=response)
