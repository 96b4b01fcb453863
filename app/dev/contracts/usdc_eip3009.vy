# pragma version ~=0.4.3
"""
@title Dev USDC (EIP-3009) for Engram's local payment chain
@notice A USDC-like ERC-20 (6 decimals) with EIP-3009 `transferWithAuthorization`
        in both ABI shapes USDC v2.2 exposes (v,r,s and `bytes signature`), so that the
        stock x402 facilitator verifies and settles against it unchanged, and
        `receiveWithAuthorization` (its `bytes signature` shape), which the batch-settlement
        scheme's ERC-3009 deposit collector calls.
@dev    DEVELOPMENT ONLY: `mint` is open to anyone. There is no constructor: the runtime
        code is placed at the real Base USDC address with `anvil_setCode`, then `initialize`
        is called once to store the EIP-712 name/version (they differ per network:
        "USD Coin"/"2" on Base 8453, "USDC"/"2" on Base Sepolia 84532).
        The EIP-712 domain is {name, version, chainId = chain.id at call time,
        verifyingContract = self}. Revert strings mirror USDC's FiatTokenV2 so x402's
        error mapping (nonce used, expired, invalid signature, balance) applies.
"""

event Transfer:
    sender: indexed(address)
    receiver: indexed(address)
    value: uint256

event Approval:
    owner: indexed(address)
    spender: indexed(address)
    value: uint256

event AuthorizationUsed:
    authorizer: indexed(address)
    nonce: indexed(bytes32)

MAX_SIGNATURE_LEN: constant(uint256) = 2048
# 4-byte selector + 7 head words + length word + padded signature.
MAX_CALLDATA_LEN: constant(uint256) = 4 + 8 * 32 + MAX_SIGNATURE_LEN
IDENTITY_PRECOMPILE: constant(address) = 0x0000000000000000000000000000000000000004

EIP712_DOMAIN_TYPEHASH: constant(bytes32) = keccak256(
    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
TRANSFER_WITH_AUTHORIZATION_TYPEHASH: constant(bytes32) = keccak256(
    "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
)
RECEIVE_WITH_AUTHORIZATION_TYPEHASH: constant(bytes32) = keccak256(
    "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
)
TRANSFER_WITH_AUTHORIZATION_BYTES_SELECTOR: constant(bytes4) = method_id(
    "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)",
    output_type=bytes4,
)
EIP1271_SELECTOR: constant(bytes4) = method_id(
    "isValidSignature(bytes32,bytes)", output_type=bytes4
)
EIP1271_MAGIC_VALUE: constant(bytes4) = 0x1626ba7e
# secp256k1n / 2: signatures with a larger `s` are malleable and rejected (EIP-2).
# = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0
SECP256K1N_HALF: constant(uint256) = (
    57896044618658097711785492504343953926418782139537452191302581570759080747168
)

symbol: public(constant(String[4])) = "USDC"
decimals: public(constant(uint8)) = 6

name: public(String[64])
version: public(String[16])
initialized: public(bool)
totalSupply: public(uint256)
balanceOf: public(HashMap[address, uint256])
allowance: public(HashMap[address, HashMap[address, uint256]])
authorizationState: public(HashMap[address, HashMap[bytes32, bool]])


@external
def initialize(_name: String[64], _version: String[16]):
    """
    @notice Store the EIP-712 domain name/version. Callable once (there is no
            constructor because the code is installed with anvil_setCode).
    """
    assert not self.initialized, "already initialized"
    self.initialized = True
    self.name = _name
    self.version = _version


@view
@internal
def _domain_separator() -> bytes32:
    return keccak256(
        abi_encode(
            EIP712_DOMAIN_TYPEHASH,
            keccak256(self.name),
            keccak256(self.version),
            chain.id,
            self,
        )
    )


@view
@external
def DOMAIN_SEPARATOR() -> bytes32:
    return self._domain_separator()


@view
@external
def eip712Domain() -> (
    bytes1, String[64], String[16], uint256, address, bytes32, DynArray[uint256, 1]
):
    """
    @notice EIP-5267 domain description (fields: name, version, chainId,
            verifyingContract).
    """
    return (0x0f, self.name, self.version, chain.id, self, empty(bytes32), [])


@internal
def _transfer(sender: address, receiver: address, amount: uint256):
    assert receiver != empty(address), "ERC20: transfer to the zero address"
    assert self.balanceOf[sender] >= amount, "ERC20: transfer amount exceeds balance"
    self.balanceOf[sender] -= amount
    self.balanceOf[receiver] += amount
    log Transfer(sender=sender, receiver=receiver, value=amount)


@external
def transfer(receiver: address, amount: uint256) -> bool:
    self._transfer(msg.sender, receiver, amount)
    return True


@external
def approve(spender: address, amount: uint256) -> bool:
    self.allowance[msg.sender][spender] = amount
    log Approval(owner=msg.sender, spender=spender, value=amount)
    return True


@external
def transferFrom(sender: address, receiver: address, amount: uint256) -> bool:
    allowed: uint256 = self.allowance[sender][msg.sender]
    if allowed != max_value(uint256):
        assert allowed >= amount, "ERC20: transfer amount exceeds allowance"
        self.allowance[sender][msg.sender] = allowed - amount
    self._transfer(sender, receiver, amount)
    return True


@external
def mint(receiver: address, amount: uint256) -> bool:
    """
    @notice Open mint: this is a development token.
    """
    assert receiver != empty(address), "ERC20: mint to the zero address"
    self.totalSupply += amount
    self.balanceOf[receiver] += amount
    log Transfer(sender=empty(address), receiver=receiver, value=amount)
    return True


@view
@internal
def _recover_ecdsa(digest: bytes32, v: uint256, r: bytes32, s: bytes32) -> address:
    if v != 27 and v != 28:
        return empty(address)
    if convert(s, uint256) > SECP256K1N_HALF:
        return empty(address)
    return ecrecover(digest, v, r, s)


@view
@internal
def _is_valid_signature(
    signer: address, digest: bytes32, signature: Bytes[MAX_SIGNATURE_LEN]
) -> bool:
    """
    @dev Same routing as USDC v2.2's SignatureChecker: a signer with code is asked
         through EIP-1271, anything else must be a 65-byte (r, s, v) ECDSA signature.
    """
    if signer.is_contract:
        success: bool = False
        response: Bytes[32] = b""
        success, response = raw_call(
            signer,
            concat(EIP1271_SELECTOR, abi_encode(digest, signature)),
            max_outsize=32,
            is_static_call=True,
            revert_on_failure=False,
        )
        if not success or len(response) < 32:
            return False
        return convert(slice(response, 0, 4), bytes4) == EIP1271_MAGIC_VALUE

    if len(signature) != 65:
        return False
    r: bytes32 = extract32(signature, 0)
    s: bytes32 = extract32(signature, 32)
    v: uint256 = convert(slice(signature, 64, 1), uint256)
    recovered: address = self._recover_ecdsa(digest, v, r, s)
    return recovered != empty(address) and recovered == signer


@internal
def _transfer_with_authorization(
    _from: address,
    _to: address,
    _value: uint256,
    _valid_after: uint256,
    _valid_before: uint256,
    _nonce: bytes32,
    _signature: Bytes[MAX_SIGNATURE_LEN],
):
    self._use_authorization(
        TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
        _from,
        _to,
        _value,
        _valid_after,
        _valid_before,
        _nonce,
        _signature,
    )
    self._transfer(_from, _to, _value)


@internal
def _use_authorization(
    _typehash: bytes32,
    _from: address,
    _to: address,
    _value: uint256,
    _valid_after: uint256,
    _valid_before: uint256,
    _nonce: bytes32,
    _signature: Bytes[MAX_SIGNATURE_LEN],
):
    """
    @dev Check an EIP-3009 authorization of type `_typehash` and mark its nonce used.
    """
    assert block.timestamp > _valid_after, "FiatTokenV2: authorization is not yet valid"
    assert block.timestamp < _valid_before, "FiatTokenV2: authorization is expired"
    assert not self.authorizationState[_from][_nonce], (
        "FiatTokenV2: authorization is used or canceled"
    )

    struct_hash: bytes32 = keccak256(
        abi_encode(
            _typehash,
            _from,
            _to,
            _value,
            _valid_after,
            _valid_before,
            _nonce,
        )
    )
    digest: bytes32 = keccak256(concat(b"\x19\x01", self._domain_separator(), struct_hash))
    assert self._is_valid_signature(_from, digest, _signature), "FiatTokenV2: invalid signature"

    self.authorizationState[_from][_nonce] = True
    log AuthorizationUsed(authorizer=_from, nonce=_nonce)


@external
def transferWithAuthorization(
    _from: address,
    _to: address,
    _value: uint256,
    _valid_after: uint256,
    _valid_before: uint256,
    _nonce: bytes32,
    v: uint8,
    r: bytes32,
    s: bytes32,
):
    """
    @notice EIP-3009 transfer with a (v, r, s) signature.
    """
    self._transfer_with_authorization(
        _from,
        _to,
        _value,
        _valid_after,
        _valid_before,
        _nonce,
        concat(r, s, convert(v, bytes1)),
    )


@external
def receiveWithAuthorization(
    _from: address,
    _to: address,
    _value: uint256,
    _valid_after: uint256,
    _valid_before: uint256,
    _nonce: bytes32,
    _signature: Bytes[MAX_SIGNATURE_LEN],
):
    """
    @notice EIP-3009 receive with a `bytes` signature: like transferWithAuthorization, but
            only the payee may submit it, so nobody can front-run a contract's pull.
    """
    assert _to == msg.sender, "FiatTokenV2: caller must be the payee"
    self._use_authorization(
        RECEIVE_WITH_AUTHORIZATION_TYPEHASH,
        _from,
        _to,
        _value,
        _valid_after,
        _valid_before,
        _nonce,
        _signature,
    )
    self._transfer(_from, _to, _value)


@external
def __default__():
    """
    @notice `transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)`.
    @dev Vyper has no overloading by argument type, so the bytes-signature overload is
         dispatched here. The whole calldata is copied to memory through the identity
         precompile (Vyper can only slice msg.data with a constant length) and then
         ABI-decoded with bounds checks.
    """
    assert len(msg.data) >= 4 and len(msg.data) <= MAX_CALLDATA_LEN, "unknown function"
    assert convert(slice(msg.data, 0, 4), bytes4) == TRANSFER_WITH_AUTHORIZATION_BYTES_SELECTOR, (
        "unknown function"
    )
    data: Bytes[MAX_CALLDATA_LEN] = raw_call(
        IDENTITY_PRECOMPILE, msg.data, max_outsize=MAX_CALLDATA_LEN, is_static_call=True
    )
    assert len(data) == len(msg.data)

    _from: address = empty(address)
    _to: address = empty(address)
    _value: uint256 = 0
    _valid_after: uint256 = 0
    _valid_before: uint256 = 0
    _nonce: bytes32 = empty(bytes32)
    _signature: Bytes[MAX_SIGNATURE_LEN] = b""
    _from, _to, _value, _valid_after, _valid_before, _nonce, _signature = abi_decode(
        slice(data, 4, len(data) - 4),
        (address, address, uint256, uint256, uint256, bytes32, Bytes[MAX_SIGNATURE_LEN]),
    )
    self._transfer_with_authorization(
        _from, _to, _value, _valid_after, _valid_before, _nonce, _signature
    )
