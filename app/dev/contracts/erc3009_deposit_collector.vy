# pragma version ~=0.4.3
"""
@title ERC-3009 deposit collector for the dev chain's batch-settlement escrow
@notice Pulls a channel deposit from the payer with the token's EIP-3009
        `receiveWithAuthorization` (gasless for the payer: the payer signs, a facilitator
        submits the escrow's `deposit`), then hands the tokens to the escrow, the only
        caller it serves. Written for the dev chain from the `x402` Python package's
        interface for this collector: `collectorData` is
        abi.encode(uint256 validAfter, uint256 validBefore, uint256 salt, bytes signature),
        and the authorization's nonce is keccak256(abi.encode(bytes32 channelId, uint256 salt)),
        so a signature is bound to one channel.
@dev    DEVELOPMENT ONLY. No constructor: the runtime code is placed at the scheme's
        deterministic collector address with `anvil_setCode`, then `initialize` stores the
        escrow's address once.
"""

# The escrow passes at most this much collector data; the signature is what is left of it
# after the three leading words and the bytes' offset and length words.
MAX_COLLECTOR_DATA_LEN: constant(uint256) = 1024
MAX_SIGNATURE_LEN: constant(uint256) = MAX_COLLECTOR_DATA_LEN - 5 * 32

interface IERC3009:
    def receiveWithAuthorization(
        _from: address,
        _to: address,
        _value: uint256,
        _valid_after: uint256,
        _valid_before: uint256,
        _nonce: bytes32,
        _signature: Bytes[MAX_SIGNATURE_LEN],
    ): nonpayable


ONLY_X402_BATCH_SETTLEMENT: constant(Bytes[4]) = method_id("OnlyX402BatchSettlement()")
INVALID_X402_BATCH_SETTLEMENT_ADDRESS: constant(Bytes[4]) = method_id(
    "InvalidX402BatchSettlementAddress()"
)
SAFE_ERC20_FAILED_OPERATION: constant(bytes4) = method_id(
    "SafeERC20FailedOperation(address)", output_type=bytes4
)

# The escrow this collector serves (set once by initialize).
x402BatchSettlement: public(address)


@external
def initialize(settlement: address):
    """
    @notice Bind the collector to its escrow. Callable once (there is no constructor
            because the code is installed with anvil_setCode).
    """
    assert self.x402BatchSettlement == empty(address), "already initialized"
    if settlement == empty(address):
        raw_revert(INVALID_X402_BATCH_SETTLEMENT_ADDRESS)
    self.x402BatchSettlement = settlement


@external
def collect(
    payer: address,
    token: address,
    amount: uint256,
    channelId: bytes32,
    collectorData: Bytes[MAX_COLLECTOR_DATA_LEN],
):
    """
    @notice Move `amount` of `token` from `payer` to the escrow with the payer's
            ReceiveWithAuthorization signature (to = this collector). Escrow only: anyone
            else could otherwise spend a signature seen in the mempool.
    """
    escrow: address = self.x402BatchSettlement
    if msg.sender != escrow:
        raw_revert(ONLY_X402_BATCH_SETTLEMENT)

    valid_after: uint256 = 0
    valid_before: uint256 = 0
    salt: uint256 = 0
    signature: Bytes[MAX_SIGNATURE_LEN] = b""
    valid_after, valid_before, salt, signature = abi_decode(
        collectorData, (uint256, uint256, uint256, Bytes[MAX_SIGNATURE_LEN])
    )
    nonce: bytes32 = keccak256(abi_encode(channelId, salt))
    extcall IERC3009(token).receiveWithAuthorization(
        payer, self, amount, valid_after, valid_before, nonce, signature
    )
    self._safe_transfer(token, escrow, amount)


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
