"""What a lost or refused PostgreSQL connection raises, by class (asyncpg's SQLSTATE classes).

A part that is down is not a bug: the API answers 503 with Retry-After for these, never 500.
"""

from __future__ import annotations

import asyncpg

# asyncpg SQLSTATE classes 08 (which holds "connection was closed in the middle of operation")
# and 57P; the socket's own errors when nothing listens. (Not asyncpg's InterfaceError: its
# subclasses include DataError, bad input a 500 must reveal.)
DATABASE_DOWN: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    ConnectionError,
    # the client's protocol confused by a connection the server is dropping mid-operation
    # ("cannot switch to state 15; another operation is in progress", seen while it shut down)
    asyncpg.InternalClientError,
)
# Taking a connection fails this way when the database is down: nothing listens (OSError), the
# connect timed out, or the server refuses (starting, shutting down, too many clients).
CONNECT_FAILURES: tuple[type[Exception], ...] = (OSError, TimeoutError, *DATABASE_DOWN)
