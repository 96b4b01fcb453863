"""Sign-In-With-X and session revocation through an Engram served in this process, so that the
suite's SQL audit (tests/support/sql_audit.py) sees their statements: elsewhere they are tested
against `engram serve` subprocesses, whose SQL the audit cannot record."""

from __future__ import annotations

import httpx
from eth_account import Account

from tests.support.api import auth
from tests.support.siwx import siwx_header


def test_a_sign_in_with_x_header_is_used_once_and_sessions_revoke(engram_url: str) -> None:
    account = Account.create()
    header = siwx_header(account, engram_url)  # GET /auth/nonce: the nonce is issued
    r = httpx.get(f"{engram_url}/v1/memories", headers=header, timeout=30)
    assert r.status_code == 200, r.text  # the nonce is consumed
    again = httpx.get(f"{engram_url}/v1/memories", headers=header, timeout=30)
    assert again.status_code == 401, again.text  # and only once
    r = httpx.delete(f"{engram_url}/auth/session", headers=auth(account), timeout=30)
    assert r.status_code == 200, r.text
