# pragma version ~=0.4.3
"""
@title Batch-settlement escrow for Engram's local payment chain
@notice The x402 `batch-settlement` scheme's escrow, written for the dev chain from the
        scheme's published interface (the ABI, EIP-712 types and error names in the `x402`
        Python package) so that x402's stock client and facilitator use it unchanged.
        A channel is identified by an immutable ChannelConfig; the payer deposits into it
        through a deposit collector, the receiver side claims payer-signed cumulative
        vouchers (`claim`, or `claimWithSignature` with the receiver authorizer's EIP-712
        signature over the batch), sweeps claimed funds with `settle`, and returns unclaimed
        escrow with `refund` / `refundWithSignature`. The payer can take unclaimed escrow
        back after the channel's withdraw delay (`initiateWithdraw`, `finalizeWithdraw`).
@dev    DEVELOPMENT ONLY. There is no constructor: the runtime code is placed at the
        scheme's deterministic address with `anvil_setCode`. Nothing needs storing up
        front: the EIP-712 domain is {name "x402 Batch Settlement", version "1",
        chainId = chain.id at call time, verifyingContract = self}.
        Reverts use the scheme's custom error names (selector = keccak of the signature),
        raised with raw_revert because they are ABI errors, not strings.
"""

# ---------------------------------------------------------------------------------------------
# Bounds. Vyper needs a maximum for every dynamic argument; these cover what the scheme sends
# (65-byte ECDSA signatures, EIP-1271 wallets' longer ones, the server channel manager's
# default of 100 claims per batch, the facilitator's claim + refund multicall) while keeping
# the memory a call touches, and so its gas, well under the facilitator's 500k gas limit.
# ---------------------------------------------------------------------------------------------

MAX_SIGNATURE_LEN: constant(uint256) = 512
MAX_CLAIMS: constant(uint256) = 100
MAX_COLLECTOR_DATA_LEN: constant(uint256) = 1024
MAX_MULTICALL_CALLS: constant(uint256) = 8
MAX_MULTICALL_CALL_LEN: constant(uint256) = 8192
MAX_MULTICALL_RESULT_LEN: constant(uint256) = 256

# ---------------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------------

struct ChannelConfig:
    payer: address
    payerAuthorizer: address
    receiver: address
    receiverAuthorizer: address
    token: address
    withdrawDelay: uint40
    salt: bytes32

struct ChannelState:
    balance: uint128
    totalClaimed: uint128

struct WithdrawalState:
    amount: uint128
    initiatedAt: uint40

struct ReceiverState:
    totalClaimed: uint128
    totalSettled: uint128

struct Voucher:
    channel: ChannelConfig
    maxClaimableAmount: uint128

struct VoucherClaim:
    voucher: Voucher
    signature: Bytes[MAX_SIGNATURE_LEN]
    totalClaimed: uint128


interface IDepositCollector:
    def collect(
        payer: address,
        token: address,
        amount: uint256,
        channelId: bytes32,
        collectorData: Bytes[MAX_COLLECTOR_DATA_LEN],
    ): nonpayable


interface IERC20:
    def balanceOf(account: address) -> uint256: view


# ---------------------------------------------------------------------------------------------
# Events (names, fields and indexing as the scheme publishes them)
# ---------------------------------------------------------------------------------------------

event ChannelCreated:
    channelId: indexed(bytes32)
    config: ChannelConfig

event ChannelClosed:
    channelId: indexed(bytes32)
    config: ChannelConfig

event Deposited:
    channelId: indexed(bytes32)
    sender: indexed(address)
    amount: uint128
    newBalance: uint128

event Claimed:
    channelId: indexed(bytes32)
    sender: indexed(address)
    claimAmount: uint128
    newTotalClaimed: uint128

event Settled:
    receiver: indexed(address)
    token: indexed(address)
    sender: indexed(address)
    amount: uint128

event Refunded:
    channelId: indexed(bytes32)
    sender: indexed(address)
    amount: uint128

event WithdrawInitiated:
    channelId: indexed(bytes32)
    amount: uint128
    finalizeAfter: uint40

event WithdrawFinalized:
    channelId: indexed(bytes32)
    sender: indexed(address)
    amount: uint128


# ---------------------------------------------------------------------------------------------
# Constants of the scheme
# ---------------------------------------------------------------------------------------------

MIN_WITHDRAW_DELAY: public(constant(uint40)) = 900  # 15 minutes
MAX_WITHDRAW_DELAY: public(constant(uint40)) = 2592000  # 30 days

CHANNEL_CONFIG_TYPEHASH: public(constant(bytes32)) = keccak256(
    "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
)
VOUCHER_TYPEHASH: public(constant(bytes32)) = keccak256(
    "Voucher(bytes32 channelId,uint128 maxClaimableAmount)"
)
REFUND_TYPEHASH: public(constant(bytes32)) = keccak256(
    "Refund(bytes32 channelId,uint256 nonce,uint128 amount)"
)
CLAIM_ENTRY_TYPEHASH: public(constant(bytes32)) = keccak256(
    "ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
)
# EIP-712 encodes a struct type with the types it references appended.
CLAIM_BATCH_TYPEHASH: public(constant(bytes32)) = keccak256(
    "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
)

EIP712_DOMAIN_TYPEHASH: constant(bytes32) = keccak256(
    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
DOMAIN_NAME: constant(String[21]) = "x402 Batch Settlement"
DOMAIN_VERSION: constant(String[1]) = "1"

EIP1271_SELECTOR: constant(bytes4) = method_id(
    "isValidSignature(bytes32,bytes)", output_type=bytes4
)
# EIP-1271's magic value as the 32-byte word a wallet returns (bytes4, left-aligned).
EIP1271_MAGIC_WORD: constant(bytes32) = (
    0x1626ba7e00000000000000000000000000000000000000000000000000000000
)
# secp256k1n / 2: signatures with a larger `s` are malleable and refused (EIP-2).
SECP256K1N_HALF: constant(uint256) = (
    57896044618658097711785492504343953926418782139537452191302581570759080747168
)

# ---------------------------------------------------------------------------------------------
# Errors: the scheme's names. ECDSA* and SafeERC20FailedOperation are the names the scheme's
# reference build raises from its signature-recovery and token-transfer helpers; FailedCall is
# a multicall step that reverted without data.
# ---------------------------------------------------------------------------------------------

INVALID_CHANNEL: constant(Bytes[4]) = method_id("InvalidChannel()")
ZERO_DEPOSIT: constant(Bytes[4]) = method_id("ZeroDeposit()")
DEPOSIT_OVERFLOW: constant(Bytes[4]) = method_id("DepositOverflow()")
INVALID_SIGNATURE: constant(Bytes[4]) = method_id("InvalidSignature()")
NOT_RECEIVER_AUTHORIZER: constant(Bytes[4]) = method_id("NotReceiverAuthorizer()")
NOT_AUTHORIZED_TO_CLAIM: constant(Bytes[4]) = method_id("NotAuthorizedToClaim()")
NOT_AUTHORIZED_TO_REFUND: constant(Bytes[4]) = method_id("NotAuthorizedToRefund()")
CLAIM_EXCEEDS_CEILING: constant(Bytes[4]) = method_id("ClaimExceedsCeiling()")
CLAIM_EXCEEDS_BALANCE: constant(Bytes[4]) = method_id("ClaimExceedsBalance()")
WITHDRAWAL_ALREADY_PENDING: constant(Bytes[4]) = method_id("WithdrawalAlreadyPending()")
WITHDRAWAL_NOT_PENDING: constant(Bytes[4]) = method_id("WithdrawalNotPending()")
NOT_AUTHORIZED_TO_FINALIZE_WITHDRAW: constant(Bytes[4]) = method_id(
    "NotAuthorizedToFinalizeWithdraw()"
)
WITHDRAW_DELAY_NOT_ELAPSED: constant(Bytes[4]) = method_id("WithdrawDelayNotElapsed()")
NOTHING_TO_WITHDRAW: constant(Bytes[4]) = method_id("NothingToWithdraw()")
WITHDRAW_AMOUNT_EXCEEDS_AVAILABLE: constant(Bytes[4]) = method_id(
    "WithdrawAmountExceedsAvailable()"
)
WITHDRAW_DELAY_OUT_OF_RANGE: constant(Bytes[4]) = method_id("WithdrawDelayOutOfRange()")
EMPTY_BATCH: constant(Bytes[4]) = method_id("EmptyBatch()")
DEPOSIT_COLLECTION_FAILED: constant(Bytes[4]) = method_id("DepositCollectionFailed()")
INVALID_COLLECTOR: constant(Bytes[4]) = method_id("InvalidCollector()")
INVALID_REFUND_NONCE: constant(Bytes[4]) = method_id("InvalidRefundNonce()")
ZERO_REFUND: constant(Bytes[4]) = method_id("ZeroRefund()")
ECDSA_INVALID_SIGNATURE: constant(Bytes[4]) = method_id("ECDSAInvalidSignature()")
ECDSA_INVALID_SIGNATURE_LENGTH: constant(bytes4) = method_id(
    "ECDSAInvalidSignatureLength(uint256)", output_type=bytes4
)
ECDSA_INVALID_SIGNATURE_S: constant(bytes4) = method_id(
    "ECDSAInvalidSignatureS(bytes32)", output_type=bytes4
)
SAFE_ERC20_FAILED_OPERATION: constant(bytes4) = method_id(
    "SafeERC20FailedOperation(address)", output_type=bytes4
)
FAILED_CALL: constant(Bytes[4]) = method_id("FailedCall()")

# ---------------------------------------------------------------------------------------------
# Storage
# ---------------------------------------------------------------------------------------------

channel_state: HashMap[bytes32, ChannelState]
withdrawal_state: HashMap[bytes32, WithdrawalState]
receiver_state: HashMap[address, HashMap[address, ReceiverState]]
# One counter per channel for Refund signatures, advanced by every refund that gets past its
# checks (signed or direct), so a direct refund voids signatures made for the old nonce.
refundNonce: public(HashMap[bytes32, uint256])


# ---------------------------------------------------------------------------------------------
# Deposits
# ---------------------------------------------------------------------------------------------


@external
@nonreentrant
def deposit(
    config: ChannelConfig,
    amount: uint128,
    collector: address,
    collectorData: Bytes[MAX_COLLECTOR_DATA_LEN],
):
    """
    @notice Pull `amount` of `config.token` from the payer into the channel through
            `collector`, which must hand the tokens to this contract; the balance
            increase is checked afterwards.
    """
    if config.payer == empty(address):
        raw_revert(INVALID_CHANNEL)
    if config.receiver == empty(address):
        raw_revert(INVALID_CHANNEL)
    if config.receiverAuthorizer == empty(address):
        raw_revert(INVALID_CHANNEL)
    if config.token == empty(address):
        raw_revert(INVALID_CHANNEL)
    if config.withdrawDelay < MIN_WITHDRAW_DELAY or config.withdrawDelay > MAX_WITHDRAW_DELAY:
        raw_revert(WITHDRAW_DELAY_OUT_OF_RANGE)
    if amount == 0:
        raw_revert(ZERO_DEPOSIT)
    if collector == empty(address):
        raw_revert(INVALID_COLLECTOR)

    channel_id: bytes32 = self._channel_id(config)
    state: ChannelState = self.channel_state[channel_id]
    if amount > max_value(uint128) - state.balance:
        raw_revert(DEPOSIT_OVERFLOW)
    state.balance += amount
    self.channel_state[channel_id] = state

    held_before: uint256 = staticcall IERC20(config.token).balanceOf(self)
    extcall IDepositCollector(collector).collect(
        config.payer, config.token, convert(amount, uint256), channel_id, collectorData
    )
    held_after: uint256 = staticcall IERC20(config.token).balanceOf(self)
    if held_after != held_before + convert(amount, uint256):
        raw_revert(DEPOSIT_COLLECTION_FAILED)

    if state.balance == amount and state.totalClaimed == 0:
        log ChannelCreated(channelId=channel_id, config=config)
    log Deposited(channelId=channel_id, sender=msg.sender, amount=amount, newBalance=state.balance)


# ---------------------------------------------------------------------------------------------
# Claims and settlement
# ---------------------------------------------------------------------------------------------


@external
@nonreentrant
def claim(voucherClaims: DynArray[VoucherClaim, MAX_CLAIMS]):
    """
    @notice Record payer-signed vouchers; the caller must be each channel's receiver or
            receiver authorizer.
    """
    if len(voucherClaims) == 0:
        raw_revert(EMPTY_BATCH)
    for voucher_claim: VoucherClaim in voucherClaims:
        if not self._is_receiver_side(msg.sender, voucher_claim.voucher.channel):
            raw_revert(NOT_AUTHORIZED_TO_CLAIM)
        self._process_voucher_claim(voucher_claim)


@external
@nonreentrant
def claimWithSignature(
    voucherClaims: DynArray[VoucherClaim, MAX_CLAIMS],
    authorizerSignature: Bytes[MAX_SIGNATURE_LEN],
):
    """
    @notice Record vouchers on the strength of the receiver authorizer's signature over the
            whole batch (anyone may submit it). Every row must share the first row's
            receiver authorizer.
    """
    if len(voucherClaims) == 0:
        raw_revert(EMPTY_BATCH)
    authorizer: address = voucherClaims[0].voucher.channel.receiverAuthorizer
    # The entries are hashed here, not in a helper taking the whole batch: passing the batch
    # to an internal function would copy all of it in memory (tens of thousands of gas).
    entry_hashes: DynArray[bytes32, MAX_CLAIMS] = []
    for voucher_claim: VoucherClaim in voucherClaims:
        entry_hashes.append(self._claim_entry_hash(voucher_claim))
    digest: bytes32 = self._claim_batch_digest(entry_hashes)
    if not self._is_valid_signature_now(authorizer, digest, authorizerSignature):
        raw_revert(INVALID_SIGNATURE)
    for voucher_claim: VoucherClaim in voucherClaims:
        if voucher_claim.voucher.channel.receiverAuthorizer != authorizer:
            raw_revert(NOT_RECEIVER_AUTHORIZER)
        self._process_voucher_claim(voucher_claim)


@external
@nonreentrant
def settle(receiver: address, token: address):
    """
    @notice Send `receiver` what has been claimed for it in `token` and not yet sent
            (anyone may call; nothing happens when there is nothing to send).
    """
    state: ReceiverState = self.receiver_state[receiver][token]
    amount: uint128 = state.totalClaimed - state.totalSettled
    if amount == 0:
        return
    self.receiver_state[receiver][token].totalSettled = state.totalClaimed
    self._safe_transfer(token, receiver, convert(amount, uint256))
    log Settled(receiver=receiver, token=token, sender=msg.sender, amount=amount)


# ---------------------------------------------------------------------------------------------
# The payer's timed withdrawal
# ---------------------------------------------------------------------------------------------


@external
@nonreentrant
def initiateWithdraw(config: ChannelConfig, amount: uint128):
    """
    @notice Start taking back up to `amount` of unclaimed escrow; it can be finalised once
            the channel's withdraw delay has passed. Payer or payer authorizer only.
    """
    if msg.sender != config.payer and msg.sender != config.payerAuthorizer:
        raw_revert(INVALID_CHANNEL)
    if amount == 0:
        raw_revert(NOTHING_TO_WITHDRAW)
    channel_id: bytes32 = self._channel_id(config)
    if self.withdrawal_state[channel_id].initiatedAt != 0:
        raw_revert(WITHDRAWAL_ALREADY_PENDING)
    state: ChannelState = self.channel_state[channel_id]
    if amount > state.balance - state.totalClaimed:
        raw_revert(WITHDRAW_AMOUNT_EXCEEDS_AVAILABLE)

    now: uint40 = convert(block.timestamp, uint40)
    self.withdrawal_state[channel_id] = WithdrawalState(amount=amount, initiatedAt=now)
    log WithdrawInitiated(
        channelId=channel_id, amount=amount, finalizeAfter=now + config.withdrawDelay
    )


@external
@nonreentrant
def finalizeWithdraw(config: ChannelConfig):
    """
    @notice Pay the pending withdrawal to the payer, capped by what is still unclaimed now
            (claims that landed during the delay come first). Payer or payer authorizer only.
    """
    if msg.sender != config.payer and msg.sender != config.payerAuthorizer:
        raw_revert(NOT_AUTHORIZED_TO_FINALIZE_WITHDRAW)
    channel_id: bytes32 = self._channel_id(config)
    pending: WithdrawalState = self.withdrawal_state[channel_id]
    if pending.initiatedAt == 0:
        raw_revert(WITHDRAWAL_NOT_PENDING)
    if block.timestamp < convert(pending.initiatedAt, uint256) + convert(
        config.withdrawDelay, uint256
    ):
        raw_revert(WITHDRAW_DELAY_NOT_ELAPSED)

    state: ChannelState = self.channel_state[channel_id]
    available: uint128 = state.balance - state.totalClaimed
    amount: uint128 = min(pending.amount, available)
    self.withdrawal_state[channel_id] = empty(WithdrawalState)
    state.balance -= amount
    self.channel_state[channel_id] = state

    log WithdrawFinalized(channelId=channel_id, sender=msg.sender, amount=amount)
    if state.balance == 0 and state.totalClaimed == 0:
        log ChannelClosed(channelId=channel_id, config=config)
    if amount > 0:
        self._safe_transfer(config.token, config.payer, convert(amount, uint256))


# ---------------------------------------------------------------------------------------------
# Cooperative refunds
# ---------------------------------------------------------------------------------------------


@external
@nonreentrant
def refund(config: ChannelConfig, amount: uint128):
    """
    @notice Return up to `amount` of unclaimed escrow to the payer. Receiver or receiver
            authorizer only; advances the channel's refund nonce.
    """
    if not self._is_receiver_side(msg.sender, config):
        raw_revert(NOT_AUTHORIZED_TO_REFUND)
    self._execute_refund(config, amount)


@external
@nonreentrant
def refundWithSignature(
    config: ChannelConfig,
    amount: uint128,
    nonce: uint256,
    receiverAuthorizerSignature: Bytes[MAX_SIGNATURE_LEN],
):
    """
    @notice `refund` on the strength of the receiver authorizer's EIP-712 Refund signature
            for the channel's current refund nonce (anyone may submit it).
    """
    channel_id: bytes32 = self._channel_id(config)
    if nonce != self.refundNonce[channel_id]:
        raw_revert(INVALID_REFUND_NONCE)
    digest: bytes32 = self._refund_digest(channel_id, nonce, amount)
    if not self._is_valid_signature_now(
        config.receiverAuthorizer, digest, receiverAuthorizerSignature
    ):
        raw_revert(INVALID_SIGNATURE)
    self._execute_refund(config, amount)


# ---------------------------------------------------------------------------------------------
# Batching: x402's facilitator claims and refunds in one transaction through this.
# ---------------------------------------------------------------------------------------------


@external
def multicall(
    data: DynArray[Bytes[MAX_MULTICALL_CALL_LEN], MAX_MULTICALL_CALLS]
) -> DynArray[Bytes[MAX_MULTICALL_RESULT_LEN], MAX_MULTICALL_CALLS]:
    """
    @notice Run each call on this contract in turn (delegatecall to self, so msg.sender is
            kept); the first failure reverts everything with that call's revert data.
    """
    results: DynArray[Bytes[MAX_MULTICALL_RESULT_LEN], MAX_MULTICALL_CALLS] = []
    for step: Bytes[MAX_MULTICALL_CALL_LEN] in data:
        success: bool = False
        response: Bytes[MAX_MULTICALL_RESULT_LEN] = b""
        success, response = raw_call(
            self,
            step,
            max_outsize=MAX_MULTICALL_RESULT_LEN,
            is_delegate_call=True,
            revert_on_failure=False,
        )
        if not success:
            if len(response) == 0:
                raw_revert(FAILED_CALL)
            raw_revert(response)
        results.append(response)
    return results


# ---------------------------------------------------------------------------------------------
# Views
# ---------------------------------------------------------------------------------------------


@view
@external
def channels(channelId: bytes32) -> (uint128, uint128):
    """
    @notice (balance, totalClaimed) of a channel.
    """
    state: ChannelState = self.channel_state[channelId]
    return state.balance, state.totalClaimed


@view
@external
def pendingWithdrawals(channelId: bytes32) -> (uint128, uint40):
    """
    @notice (amount, initiatedAt) of a channel's pending withdrawal; zeros when none.
    """
    pending: WithdrawalState = self.withdrawal_state[channelId]
    return pending.amount, pending.initiatedAt


@view
@external
def receivers(receiver: address, token: address) -> (uint128, uint128):
    """
    @notice (totalClaimed, totalSettled) for a receiver in a token.
    """
    state: ReceiverState = self.receiver_state[receiver][token]
    return state.totalClaimed, state.totalSettled


@view
@external
def getChannelId(config: ChannelConfig) -> bytes32:
    """
    @notice The channel id: the EIP-712 hash of the ChannelConfig in this contract's domain,
            so the same config on another chain or contract is another channel.
    """
    return self._channel_id(config)


@view
@external
def getVoucherDigest(channelId: bytes32, maxClaimableAmount: uint128) -> bytes32:
    return self._voucher_digest(channelId, maxClaimableAmount)


@view
@external
def getRefundDigest(channelId: bytes32, nonce: uint256, amount: uint128) -> bytes32:
    return self._refund_digest(channelId, nonce, amount)


@view
@external
def getClaimBatchDigest(voucherClaims: DynArray[VoucherClaim, MAX_CLAIMS]) -> bytes32:
    """
    @notice The digest the receiver authorizer signs for `claimWithSignature` (defined for
            an empty batch too, though claims refuse one).
    """
    entry_hashes: DynArray[bytes32, MAX_CLAIMS] = []
    for voucher_claim: VoucherClaim in voucherClaims:
        entry_hashes.append(self._claim_entry_hash(voucher_claim))
    return self._claim_batch_digest(entry_hashes)


@view
@external
def DOMAIN_SEPARATOR() -> bytes32:
    return self._domain_separator()


@view
@external
def eip712Domain() -> (
    bytes1, String[21], String[1], uint256, address, bytes32, DynArray[uint256, 1]
):
    """
    @notice EIP-5267 domain description (fields: name, version, chainId,
            verifyingContract).
    """
    return (0x0f, DOMAIN_NAME, DOMAIN_VERSION, chain.id, self, empty(bytes32), [])


# ---------------------------------------------------------------------------------------------
# Internals
# ---------------------------------------------------------------------------------------------


@view
@internal
def _domain_separator() -> bytes32:
    return keccak256(
        abi_encode(
            EIP712_DOMAIN_TYPEHASH,
            keccak256(DOMAIN_NAME),
            keccak256(DOMAIN_VERSION),
            chain.id,
            self,
        )
    )


@view
@internal
def _typed_data_hash(struct_hash: bytes32) -> bytes32:
    return keccak256(concat(b"\x19\x01", self._domain_separator(), struct_hash))


@view
@internal
def _channel_id(config: ChannelConfig) -> bytes32:
    return self._typed_data_hash(
        keccak256(
            abi_encode(
                CHANNEL_CONFIG_TYPEHASH,
                config.payer,
                config.payerAuthorizer,
                config.receiver,
                config.receiverAuthorizer,
                config.token,
                config.withdrawDelay,
                config.salt,
            )
        )
    )


@view
@internal
def _voucher_digest(channel_id: bytes32, max_claimable: uint128) -> bytes32:
    return self._typed_data_hash(keccak256(abi_encode(VOUCHER_TYPEHASH, channel_id, max_claimable)))


@view
@internal
def _refund_digest(channel_id: bytes32, nonce: uint256, amount: uint128) -> bytes32:
    return self._typed_data_hash(keccak256(abi_encode(REFUND_TYPEHASH, channel_id, nonce, amount)))


@view
@internal
def _claim_entry_hash(voucher_claim: VoucherClaim) -> bytes32:
    return keccak256(
        abi_encode(
            CLAIM_ENTRY_TYPEHASH,
            self._channel_id(voucher_claim.voucher.channel),
            voucher_claim.voucher.maxClaimableAmount,
            voucher_claim.totalClaimed,
        )
    )


@view
@internal
def _claim_batch_digest(entry_hashes: DynArray[bytes32, MAX_CLAIMS]) -> bytes32:
    # EIP-712 hashes an array of structs as keccak256 of its members' hashes, concatenated;
    # abi_encode of a dynamic array is (offset, length, items...): the items are that.
    packed: Bytes[32 * MAX_CLAIMS + 64] = abi_encode(entry_hashes)
    entries_root: bytes32 = keccak256(slice(packed, 64, 32 * len(entry_hashes)))
    return self._typed_data_hash(keccak256(abi_encode(CLAIM_BATCH_TYPEHASH, entries_root)))


@pure
@internal
def _is_receiver_side(sender: address, config: ChannelConfig) -> bool:
    return sender == config.receiverAuthorizer or sender == config.receiver


@internal
def _process_voucher_claim(voucher_claim: VoucherClaim):
    channel_id: bytes32 = self._channel_id(voucher_claim.voucher.channel)
    state: ChannelState = self.channel_state[channel_id]
    # Totals are cumulative: a voucher at or below what is already claimed changes nothing,
    # so replaying an old one is harmless.
    if voucher_claim.totalClaimed <= state.totalClaimed:
        return
    if voucher_claim.totalClaimed > voucher_claim.voucher.maxClaimableAmount:
        raw_revert(CLAIM_EXCEEDS_CEILING)
    if voucher_claim.totalClaimed > state.balance:
        raw_revert(CLAIM_EXCEEDS_BALANCE)

    digest: bytes32 = self._voucher_digest(channel_id, voucher_claim.voucher.maxClaimableAmount)
    config: ChannelConfig = voucher_claim.voucher.channel
    if config.payerAuthorizer != empty(address):
        # A payer authorizer is a plain key: ECDSA only, malformed signatures revert.
        if self._recover_strict(digest, voucher_claim.signature) != config.payerAuthorizer:
            raw_revert(INVALID_SIGNATURE)
    elif not self._is_valid_signature_now(config.payer, digest, voucher_claim.signature):
        raw_revert(INVALID_SIGNATURE)

    delta: uint128 = voucher_claim.totalClaimed - state.totalClaimed
    self.channel_state[channel_id].totalClaimed = voucher_claim.totalClaimed
    self.receiver_state[config.receiver][config.token].totalClaimed += delta
    log Claimed(
        channelId=channel_id,
        sender=msg.sender,
        claimAmount=delta,
        newTotalClaimed=voucher_claim.totalClaimed,
    )


@internal
def _execute_refund(config: ChannelConfig, amount: uint128):
    if amount == 0:
        raw_revert(ZERO_REFUND)
    channel_id: bytes32 = self._channel_id(config)
    # The nonce moves even when nothing is left to refund (see refundNonce).
    self.refundNonce[channel_id] = unsafe_add(self.refundNonce[channel_id], 1)

    state: ChannelState = self.channel_state[channel_id]
    refunded: uint128 = min(amount, state.balance - state.totalClaimed)
    if refunded == 0:
        return
    state.balance -= refunded
    self.channel_state[channel_id] = state

    # A refund also shrinks, or clears, a pending withdrawal of the same escrow.
    pending: WithdrawalState = self.withdrawal_state[channel_id]
    if pending.initiatedAt != 0:
        if refunded >= pending.amount:
            self.withdrawal_state[channel_id] = empty(WithdrawalState)
        else:
            self.withdrawal_state[channel_id].amount = pending.amount - refunded

    log Refunded(channelId=channel_id, sender=msg.sender, amount=refunded)
    if state.balance == 0 and state.totalClaimed == 0:
        log ChannelClosed(channelId=channel_id, config=config)
    self._safe_transfer(config.token, config.payer, convert(refunded, uint256))


@pure
@internal
def _split_signature(signature: Bytes[MAX_SIGNATURE_LEN]) -> (uint256, bytes32, bytes32):
    return (
        convert(slice(signature, 64, 1), uint256),
        extract32(signature, 0),
        extract32(signature, 32),
    )


@view
@internal
def _recover_strict(digest: bytes32, signature: Bytes[MAX_SIGNATURE_LEN]) -> address:
    """
    @dev ECDSA recovery that reverts on a malformed signature: not 65 bytes, a high `s`,
         or one that recovers no address.
    """
    if len(signature) != 65:
        raw_revert(abi_encode(len(signature), method_id=ECDSA_INVALID_SIGNATURE_LENGTH))
    v: uint256 = 0
    r: bytes32 = empty(bytes32)
    s: bytes32 = empty(bytes32)
    v, r, s = self._split_signature(signature)
    if convert(s, uint256) > SECP256K1N_HALF:
        raw_revert(abi_encode(s, method_id=ECDSA_INVALID_SIGNATURE_S))
    recovered: address = empty(address)
    if v == 27 or v == 28:
        recovered = ecrecover(digest, v, r, s)
    if recovered == empty(address):
        raw_revert(ECDSA_INVALID_SIGNATURE)
    return recovered


@view
@internal
def _is_valid_signature_now(
    signer: address, digest: bytes32, signature: Bytes[MAX_SIGNATURE_LEN]
) -> bool:
    """
    @dev Never reverts. An address with code is asked through EIP-1271 (its answer must be
         the magic value's full word); anything else must give a well-formed 65-byte
         ECDSA signature recovering to it.
    """
    if signer.is_contract:
        success: bool = False
        response: Bytes[32] = b""
        success, response = raw_call(
            signer,
            abi_encode(digest, signature, method_id=EIP1271_SELECTOR),
            max_outsize=32,
            is_static_call=True,
            revert_on_failure=False,
        )
        return success and len(response) == 32 and extract32(response, 0) == EIP1271_MAGIC_WORD

    if len(signature) != 65:
        return False
    v: uint256 = 0
    r: bytes32 = empty(bytes32)
    s: bytes32 = empty(bytes32)
    v, r, s = self._split_signature(signature)
    if convert(s, uint256) > SECP256K1N_HALF or (v != 27 and v != 28):
        return False
    recovered: address = ecrecover(digest, v, r, s)
    return recovered != empty(address) and recovered == signer


@internal
def _safe_transfer(token: address, receiver: address, amount: uint256):
    """
    @dev ERC-20 transfer that accepts tokens returning nothing, and refuses a `false`
         answer or a token address without code. A reverting token's reason is passed on.
    """
    response: Bytes[32] = raw_call(
        token,
        abi_encode(receiver, amount, method_id=method_id("transfer(address,uint256)")),
        max_outsize=32,
    )
    if len(response) == 0:
        if not token.is_contract:
            raw_revert(abi_encode(token, method_id=SAFE_ERC20_FAILED_OPERATION))
    elif convert(response, uint256) != 1:
        raw_revert(abi_encode(token, method_id=SAFE_ERC20_FAILED_OPERATION))
