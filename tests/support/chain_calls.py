"""Calls to the dev chain's contracts from tests: funded accounts, sent transactions, and the
custom error a call reverts with (simulated, so nothing changes)."""

from __future__ import annotations

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import keccak
from web3.contract.contract import ContractFunction
from web3.exceptions import ContractLogicError
from web3.types import TxReceipt

from app.dev.chain import DevChain


def account_with_gas(dev: DevChain, usdc: int = 0) -> LocalAccount:
    account: LocalAccount = Account.create()
    dev.fund(account.address, usdc, eth_wei=10**18)
    return account


def transact(dev: DevChain, sender: LocalAccount, call: ContractFunction) -> TxReceipt:
    tx = call.build_transaction(
        {"from": sender.address, "nonce": dev.w3.eth.get_transaction_count(sender.address)}
    )
    signed = sender.sign_transaction(tx)
    tx_hash = dev.w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = dev.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30)
    assert receipt["status"] == 1, receipt
    return receipt


def revert_data(call: ContractFunction, sender: str) -> str:
    """The raw revert data of `call` sent by `sender` (simulated: nothing changes)."""
    with pytest.raises(ContractLogicError) as info:
        call.call({"from": sender})
    data = info.value.data
    assert isinstance(data, str), info.value
    return data


def selector(error: str) -> str:
    return "0x" + keccak(text=error)[:4].hex()


def assert_reverts(call: ContractFunction, sender: str, error: str) -> None:
    assert revert_data(call, sender)[:10] == selector(error), error
