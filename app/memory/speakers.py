"""Who said a memory, and whom a query names: for recall's speaker boost (docs: concepts/recall.md).

A memory written as a line of a transcript, `Name: text` (after an optional `[date]`, the form
chat captures take: "[1:56 pm on 8 May, 2023] Ann: I went to the support group"), is said by
Name. A query names people by capitalised words ("What books has John read?"); a capitalised
word that is no one's name ("What", "Dune") simply matches no speaker.
"""

from __future__ import annotations

import re

_SPEAKER = re.compile(r"^\s*(?:\[[^\]]{1,80}\]\s*)?([A-Z][\w'.-]{0,40}(?: [A-Z][\w'.-]{0,40})?):\s")
_CAPITALISED = re.compile(r"\b[A-Z][a-z][\w'-]*")


def speaker_of(content: str) -> str | None:
    """The name a transcript line starts with, else None."""
    match = _SPEAKER.match(content)
    return match.group(1).lower() if match else None


def named_in(query: str) -> set[str]:
    """The query's capitalised words, lower-cased, without a possessive 's."""
    return {word.lower().removesuffix("'s") for word in _CAPITALISED.findall(query)}
