"""The ports tests hand to the servers they start lie outside the kernel's ephemeral range, where
no outgoing connection can be given one before the server binds it (tests/support/server.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support.server import free_port

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def test_a_servers_port_is_below_the_ephemeral_range_and_free() -> None:
    low = int(EPHEMERAL.read_text().split()[0]) if EPHEMERAL.exists() else 32768
    ports = {free_port() for _ in range(50)}
    assert all(port < low for port in ports), sorted(ports)
    assert len(ports) > 40  # drawn at random: two tests seldom draw the same
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))
