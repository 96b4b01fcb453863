# pragma version ~=0.4.3
"""
@title The part of Uniswap's Permit2 (SignatureTransfer) that x402 uses, for the dev chain
@notice `permitWitnessTransferFrom`: move tokens the owner approved to Permit2 on the strength
        of the owner's EIP-712 PermitWitnessTransferFrom signature, which names the spender
        (msg.sender), an unordered nonce, a deadline and a caller-typed witness. x402's
        batch-settlement Permit2 deposit collector binds the witness to a channel id.
@dev    DEVELOPMENT ONLY, installed with `anvil_setCode` at Permit2's well-known address.
        Written from Permit2's published interface and behaviour: EIP-712 domain
        {name "Permit2", chainId, verifyingContract} (no version); nonces are bits in
        `nonceBitmap[owner][nonce >> 8]`; an owner with code is asked through EIP-1271.
        Reverts use Permit2's error names.
"""

MAX_SIGNATURE_LEN: constant(uint256) = 1024
MAX_WITNESS_TYPE_LEN: constant(uint256) = 1024

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


event UnorderedNonceInvalidation:
    owner: indexed(address)
    word: uint256
    mask: uint256


EIP712_DOMAIN_TYPEHASH: constant(bytes32) = keccak256(
    "EIP712Domain(string name,uint256 chainId,address verifyingContract)"
)
TOKEN_PERMISSIONS_TYPEHASH: constant(bytes32) = keccak256(
    "TokenPermissions(address token,uint256 amount)"
)
# The caller's witness type string completes this stub.
PERMIT_WITNESS_TRANSFER_FROM_TYPEHASH_STUB: constant(String[100]) = (
    "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,"
)
EIP1271_MAGIC_WORD: constant(bytes32) = (
    0x1626ba7e00000000000000000000000000000000000000000000000000000000
)
EIP1271_SELECTOR: constant(bytes4) = method_id(
    "isValidSignature(bytes32,bytes)", output_type=bytes4
)

SIGNATURE_EXPIRED: constant(bytes4) = method_id("SignatureExpired(uint256)", output_type=bytes4)
INVALID_AMOUNT: constant(bytes4) = method_id("InvalidAmount(uint256)", output_type=bytes4)
INVALID_NONCE: constant(Bytes[4]) = method_id("InvalidNonce()")
INVALID_SIGNATURE_LENGTH: constant(Bytes[4]) = method_id("InvalidSignatureLength()")
INVALID_SIGNATURE: constant(Bytes[4]) = method_id("InvalidSignature()")
INVALID_SIGNER: constant(Bytes[4]) = method_id("InvalidSigner()")
INVALID_CONTRACT_SIGNATURE: constant(Bytes[4]) = method_id("InvalidContractSignature()")

nonceBitmap: public(HashMap[address, HashMap[uint256, uint256]])


@view
@external
def DOMAIN_SEPARATOR() -> bytes32:
    return self._domain_separator()


@external
def permitWitnessTransferFrom(
    permit: PermitTransferFrom,
    transferDetails: SignatureTransferDetails,
    owner: address,
    witness: bytes32,
    witnessTypeString: String[MAX_WITNESS_TYPE_LEN],
    signature: Bytes[MAX_SIGNATURE_LEN],
):
    """
    @notice Transfer up to the permitted amount from `owner` to `transferDetails.to`, once
            per nonce, before the deadline, for the spender named in the signature.
    """
    if block.timestamp > permit.deadline:
        raw_revert(abi_encode(permit.deadline, method_id=SIGNATURE_EXPIRED))
    if transferDetails.requestedAmount > permit.permitted.amount:
        raw_revert(abi_encode(permit.permitted.amount, method_id=INVALID_AMOUNT))
    self._use_unordered_nonce(owner, permit.nonce)

    type_hash: bytes32 = keccak256(concat(PERMIT_WITNESS_TRANSFER_FROM_TYPEHASH_STUB, witnessTypeString))
    permissions_hash: bytes32 = keccak256(
        abi_encode(TOKEN_PERMISSIONS_TYPEHASH, permit.permitted.token, permit.permitted.amount)
    )
    data_hash: bytes32 = keccak256(
        abi_encode(type_hash, permissions_hash, msg.sender, permit.nonce, permit.deadline, witness)
    )
    digest: bytes32 = keccak256(concat(b"\x19\x01", self._domain_separator(), data_hash))
    self._verify(signature, digest, owner)

    self._safe_transfer_from(
        permit.permitted.token, owner, transferDetails.to, transferDetails.requestedAmount
    )


@external
def invalidateUnorderedNonces(wordPos: uint256, mask: uint256):
    """
    @notice Burn the caller's nonces whose bits are set in `mask`, in word `wordPos`.
    """
    self.nonceBitmap[msg.sender][wordPos] |= mask
    log UnorderedNonceInvalidation(owner=msg.sender, word=wordPos, mask=mask)


@view
@internal
def _domain_separator() -> bytes32:
    return keccak256(abi_encode(EIP712_DOMAIN_TYPEHASH, keccak256("Permit2"), chain.id, self))


@internal
def _use_unordered_nonce(owner: address, nonce: uint256):
    word_pos: uint256 = nonce >> 8
    bit: uint256 = 1 << (nonce & 255)
    flipped: uint256 = self.nonceBitmap[owner][word_pos] ^ bit
    if flipped & bit == 0:
        raw_revert(INVALID_NONCE)
    self.nonceBitmap[owner][word_pos] = flipped


@view
@internal
def _verify(signature: Bytes[MAX_SIGNATURE_LEN], digest: bytes32, claimed_signer: address):
    if claimed_signer.is_contract:
        success: bool = False
        response: Bytes[32] = b""
        success, response = raw_call(
            claimed_signer,
            abi_encode(digest, signature, method_id=EIP1271_SELECTOR),
            max_outsize=32,
            is_static_call=True,
            revert_on_failure=False,
        )
        if not success or len(response) != 32 or extract32(response, 0) != EIP1271_MAGIC_WORD:
            raw_revert(INVALID_CONTRACT_SIGNATURE)
        return

    r: bytes32 = empty(bytes32)
    s: bytes32 = empty(bytes32)
    v: uint256 = 0
    if len(signature) == 65:
        r = extract32(signature, 0)
        s = extract32(signature, 32)
        v = convert(slice(signature, 64, 1), uint256)
    elif len(signature) == 64:
        # EIP-2098 compact form: the top bit of `vs` is v - 27, the rest is s.
        r = extract32(signature, 0)
        vs: uint256 = convert(extract32(signature, 32), uint256)
        s = convert(vs & max_value(uint256) >> 1, bytes32)
        v = (vs >> 255) + 27
    else:
        raw_revert(INVALID_SIGNATURE_LENGTH)
    signer: address = empty(address)
    if v == 27 or v == 28:
        signer = ecrecover(digest, v, r, s)
    if signer == empty(address):
        raw_revert(INVALID_SIGNATURE)
    if signer != claimed_signer:
        raw_revert(INVALID_SIGNER)


@internal
def _safe_transfer_from(token: address, owner: address, receiver: address, amount: uint256):
    success: bool = False
    response: Bytes[32] = b""
    success, response = raw_call(
        token,
        abi_encode(
            owner, receiver, amount, method_id=method_id("transferFrom(address,address,uint256)")
        ),
        max_outsize=32,
        revert_on_failure=False,
    )
    assert success and (len(response) == 0 or convert(response, uint256) == 1), (
        "TRANSFER_FROM_FAILED"
    )
