# pragma version ~=0.4.3
"""
@title The part of Multicall3 that x402's facilitator reads through, for the dev chain
@notice `tryAggregate(requireSuccess, calls)`: run each (target, callData) call and return
        (success, returnData) for each. x402's EVM facilitator batches its channel-state and
        balance reads this way, at Multicall3's well-known address, which a fresh anvil
        chain leaves empty.
@dev    DEVELOPMENT ONLY, installed with `anvil_setCode`. Only what x402 calls is here.
"""

# x402 reads a handful of words per batch (channels, pendingWithdrawals, refundNonce,
# balanceOf); these bounds leave room for more.
MAX_CALLS: constant(uint256) = 16
MAX_CALL_DATA_LEN: constant(uint256) = 2048
MAX_RETURN_DATA_LEN: constant(uint256) = 1024

struct Call:
    target: address
    callData: Bytes[MAX_CALL_DATA_LEN]

struct Result:
    success: bool
    returnData: Bytes[MAX_RETURN_DATA_LEN]


@external
@payable
def tryAggregate(
    requireSuccess: bool, calls: DynArray[Call, MAX_CALLS]
) -> DynArray[Result, MAX_CALLS]:
    results: DynArray[Result, MAX_CALLS] = []
    for item: Call in calls:
        success: bool = False
        response: Bytes[MAX_RETURN_DATA_LEN] = b""
        success, response = raw_call(
            item.target,
            item.callData,
            max_outsize=MAX_RETURN_DATA_LEN,
            revert_on_failure=False,
        )
        if requireSuccess:
            assert success, "Multicall3: call failed"
        results.append(Result(success=success, returnData=response))
    return results
