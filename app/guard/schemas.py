"""Wire structs of namespace guards: a namespace's mode, and an approved memory."""

from __future__ import annotations

from msgspec import Struct

from app.guard.service import GuardMode
from app.kit.schemas import StrictStruct


class GuardIn(StrictStruct):
    mode: GuardMode  # off | flag | refuse | review (app/guard/service.py)


class GuardAnswer(Struct):
    namespace: str
    mode: GuardMode
