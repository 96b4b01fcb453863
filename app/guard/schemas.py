"""Wire structs of namespace guards: a namespace's mode, and an approved memory."""

from __future__ import annotations

from msgspec import Struct

from app.core.schemas import StrictStruct
from app.guard.service import GuardMode


class GuardIn(StrictStruct):
    mode: GuardMode  # off | flag | refuse | review (app/guard/service.py)


class GuardAnswer(Struct):
    namespace: str
    mode: GuardMode
