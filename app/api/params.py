"""Explicit parameter markers shared by controllers (Litestar 3 drops inferred kinds)."""

from __future__ import annotations

from typing import Annotated, TypeAlias

import asyncpg
from litestar.di import NamedDependency
from litestar.params import QueryParameter

Conn: TypeAlias = NamedDependency[asyncpg.Connection]
Limit100: TypeAlias = Annotated[int, QueryParameter(ge=1, le=100)]
Offset: TypeAlias = Annotated[int, QueryParameter(ge=0)]
