"""Turning conversations into memories: the shared types, the FactModel protocol that extract,
ingest, consolidate (llm mode) and context summarization call, and capture hygiene.

Two implementations: `app.ai.heuristics.HeuristicFactModel` (offline, deterministic) and
`app.ai.llm.OpenAIFactModel` (any OpenAI-compatible chat endpoint); `build_fact_model` picks one.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from app.config import LLMSettings

__all__ = [
    "CONTEXT_CLOSE",
    "CONTEXT_OPEN",
    "FOREIGN_CONTEXT_TAGS",
    "INJECTION_PATTERNS",
    "MAX_FACTS_PER_EXTRACTION",
    "MAX_FACT_CHARS",
    "MAX_TAGS_PER_FACT",
    "MAX_TAG_CHARS",
    "MEMORY_TYPES",
    "TAG_STOPWORDS",
    "Extraction",
    "Fact",
    "FactModel",
    "FactModelBadOutput",
    "FactModelError",
    "FactModelUnavailable",
    "Message",
    "build_fact_model",
    "clamp_importance",
    "dedupe_facts",
    "looks_like_injection",
    "make_fact",
    "normalise_tags",
    "salient_tags",
    "salient_terms",
    "strip_engram_context",
]

# The contract's memory types (memoclaw-api.md, "Memory object").
MEMORY_TYPES = ("correction", "preference", "decision", "project", "observation", "general")

# Contract limits (memoclaw-api.md): content <= 8,192 chars, tags <= 64 chars. Five tags per
# extracted fact (the contract allows ten per memory) leaves room for tags a client adds later;
# a hundred facts per call is the store-batch limit, so one extraction fits one batch.
MAX_FACT_CHARS = 8192
MAX_TAG_CHARS = 64
MAX_TAGS_PER_FACT = 5
MAX_FACTS_PER_EXTRACTION = 100


@dataclass(frozen=True)
class Message:
    role: str  # "user", "assistant", "system", "tool", ... as the client sent it
    content: str


@dataclass(frozen=True)
class Fact:
    content: str  # 1..MAX_FACT_CHARS chars
    importance: float  # 0..1
    memory_type: str  # one of MEMORY_TYPES
    tags: tuple[str, ...]  # 1..MAX_TAGS_PER_FACT, lowercase, each <= MAX_TAG_CHARS


@dataclass(frozen=True)
class Extraction:
    facts: list[Fact]
    tokens_used: int  # LLM tokens over every attempt that got an answer; 0 offline


class FactModel(Protocol):
    name: str  # "heuristic" or the LLM's model name

    async def extract(self, messages: Sequence[Message]) -> Extraction:
        """Durable facts about the user or project stated in a conversation."""
        ...

    async def merge(self, contents: Sequence[str]) -> tuple[str, int]:
        """One memory that says everything a cluster of near-duplicates says (oldest first)
        -> (content, tokens)."""
        ...

    async def summarize(self, contents: Sequence[str], max_words: int) -> tuple[str, int]:
        """A briefing of at most `max_words` words from memories in relevance order
        -> (summary, tokens)."""
        ...


class FactModelError(Exception):
    """A fact model could not answer. `tokens_used` still counts what the failed call cost."""

    def __init__(self, message: str, tokens_used: int = 0, attempts: int = 1) -> None:
        super().__init__(message)
        self.tokens_used = tokens_used
        self.attempts = attempts


class FactModelUnavailable(FactModelError):
    """The model endpoint kept failing (HTTP 429/5xx, timeouts, connection errors) or refused
    the request outright (4xx); worth a 503-style answer, the caller may try again later."""


class FactModelBadOutput(FactModelError):
    """The model answered, but never with something that fits the schema (or it refused)."""


# --------------------------------------------------------------------------- normalisation


def clamp_importance(value: object, default: float = 0.5) -> float:
    """A float in 0..1; anything that is not a finite number becomes `default`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    number = float(value)
    if not math.isfinite(number):
        return default
    return round(min(1.0, max(0.0, number)), 3)


def normalise_tags(tags: Iterable[object], fallback: str) -> tuple[str, ...]:
    """Lowercase, whitespace-collapsed, <= 64 chars, deduplicated, at most five; never empty."""
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            continue
        clean = " ".join(tag.lower().split())[:MAX_TAG_CHARS].strip()
        if clean and clean not in out:
            out.append(clean)
        if len(out) == MAX_TAGS_PER_FACT:
            break
    return tuple(out) or (fallback,)


def make_fact(
    content: object, importance: object, memory_type: object, tags: Iterable[object]
) -> Fact | None:
    """A valid Fact from untrusted parts (an LLM's JSON, a heuristic), or None when the
    content is empty. Out-of-range values are clamped rather than rejected."""
    if not isinstance(content, str):
        return None
    text = " ".join(content.replace("\x00", "").split())[:MAX_FACT_CHARS].strip()
    if not text:
        return None
    kind = memory_type if isinstance(memory_type, str) and memory_type in MEMORY_TYPES else None
    kind = kind or "general"
    return Fact(
        content=text,
        importance=clamp_importance(importance),
        memory_type=kind,
        tags=normalise_tags(tags, fallback=kind),
    )


def dedupe_facts(facts: Iterable[Fact]) -> list[Fact]:
    """First occurrence of each content (case and punctuation aside), at most a batch's worth."""
    seen: set[str] = set()
    out: list[Fact] = []
    for fact in facts:
        key = " ".join(re.findall(r"\w+", fact.content.casefold()))
        if key in seen:
            continue
        seen.add(key)
        out.append(fact)
        if len(out) == MAX_FACTS_PER_EXTRACTION:
            break
    return out


# --------------------------------------------------------------------------- salient terms

# Words that never make a useful tag: English function words, chat filler, and the cue words
# that decide a memory's type or importance (the type already says "preference").
TAG_STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have haven't
    having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll
    i'm i've if in into is isn't it it's its itself let's me more most mustn't my myself nor
    not of off on once only or other ought our ours ourselves out over own same shan't she
    she'd she'll she's should shouldn't so some such than that that's the their theirs them
    themselves then there there's these they they'd they'll they're they've this those through
    to too under until up very was wasn't we we'd we'll we're we've were weren't what what's
    when when's where where's which while who who's whom why why's with won't would wouldn't
    you you'd you'll you're you've your yours yourself yourselves will just also really still
    now every everything something anything thing things lot lots much many one two get gets
    got make makes made use uses used using want wants need needs go goes going went know
    think thought say said see saw seen like likes love loves hate hates prefer prefers
    preferred preference favorite favourite always never actually correction decided decide
    decision chose choose chosen remember important must today yesterday tonight morning
    evening night afternoon noticed observed new old good great bad way instead maybe might
    perhaps probably someday sometimes usually take takes took run runs ran put keep keeps try
    tries work works start starts ok okay k kk thanks thank thx ty lol lmao rofl haha hahaha
    hehe hi hello hey yo hiya yes yeah yep yup no nope nah sure cool nice awesome perfect
    alright right fine bye goodbye cheers np welcome hmm hm um uh oh wow indeed exactly agreed
    absolutely totally again well please""".split()
)
_WORD = re.compile(r"[a-z0-9][a-z0-9+#_.'-]*")


def salient_terms(text: str) -> list[str]:
    """The text's content words in order: lowercase, possessives trimmed; stopwords, words under
    three characters, other contractions and bare numbers left out ("node.js", "c++" stay)."""
    out: list[str] = []
    for raw in _WORD.findall(text.lower().replace("\u2019", "'")):
        word = raw.strip(".-_'")
        if word.endswith("'s"):
            word = word[:-2]
        if len(word) < 3 or "'" in word or word in TAG_STOPWORDS or word.replace(".", "").isdigit():
            continue
        out.append(word[:MAX_TAG_CHARS])
    return out


def salient_tags(
    text: str, limit: int = MAX_TAGS_PER_FACT, background: Mapping[str, int] | None = None
) -> list[str]:
    """Up to `limit` tags from the text's content words: the most frequent in the text first,
    then the most frequent in `background` (say, a whole conversation), then the first seen."""
    terms = salient_terms(text)
    counts = Counter(terms)
    first_seen = {term: i for i, term in reversed(list(enumerate(terms)))}
    weight = background or {}
    ranked = sorted(counts, key=lambda t: (-counts[t], -weight.get(t, 0), first_seen[t]))
    return ranked[:limit]


# --------------------------------------------------------------------------- capture hygiene

# The context builder wraps every block it injects into a prompt in these tags, so that a
# conversation captured later does not feed Engram's own memories back in as new facts.
CONTEXT_OPEN = "<engram-context>"
CONTEXT_CLOSE = "</engram-context>"
# What other memory plugins inject (MemoClaw's own, OpenClaw-style "relevant memories").
FOREIGN_CONTEXT_TAGS = ("memoclaw-context", "relevant-memories")
_CONTEXT_TAG_NAMES = (CONTEXT_OPEN.strip("<>"), *FOREIGN_CONTEXT_TAGS)

_TAG_ALTERNATION = "|".join(re.escape(name) for name in _CONTEXT_TAG_NAMES)
# An open tag (attributes allowed) whose body holds no further open tag of the same name, up to
# its close tag or the end of the text. Matching innermost blocks first and repeating handles
# nesting; an unclosed tag swallows the rest of the text, which is what a truncated paste needs.
_CONTEXT_BLOCK = re.compile(
    rf"<(?P<name>{_TAG_ALTERNATION})(?:\s[^>]*)?>(?:(?!<(?P=name)[\s>]).)*?(?:</(?P=name)\s*>|\Z)",
    re.IGNORECASE | re.DOTALL,
)
_STRAY_CLOSE = re.compile(rf"</(?:{_TAG_ALTERNATION})\s*>", re.IGNORECASE)
_BLANK_RUNS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def strip_engram_context(text: str) -> str:
    """`text` without any memory-context block Engram or another memory plugin injected."""
    previous = None
    while previous != text:
        previous, text = text, _CONTEXT_BLOCK.sub("", text)
    text = _STRAY_CLOSE.sub("", text)
    return _BLANK_RUNS.sub("\n\n", text).strip()


# Lines that try to steer a model rather than state something. Shared by the heuristic
# extractor (such lines never become memories) and the context builder (stored memories that
# look like this are not replayed into prompts). Deliberately narrow: a false positive costs one
# dropped line, but the patterns must not fire on ordinary statements about instructions.
INJECTION_PATTERNS: list[re.Pattern[str]] = [
    re.compile(p, re.IGNORECASE)
    for p in (
        # "ignore all previous instructions", "disregard the above rules"
        r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(previous|prior|above|"
        r"earlier|preceding|all|any|your|system)\b[^.\n]{0,40}\b(instructions?|"
        r"prompts?|rules|directives|guidelines|guardrails|context|messages?)\b",
        # a forged turn: "system: ...", "### assistant:", "[developer]:" (also drops an honest
        # "System: macOS 14" line; rare enough, and such a line is rarely the fact that matters)
        r"^\W{0,4}(system|assistant|developer)\W{0,3}\s*:",
        # chat-template control tokens
        r"<\|?(im_start|im_end|system|endoftext|eot_id|start_header_id)\|?>",
        r"\[/?(INST|SYS)\]|<</?SYS>>",
        # role reassignment
        r"\byou are (now|no longer)\b",
        r"\bfrom now on,? (you|the assistant|the ai|the model)\b",
        r"\bnew (system )?(instructions?|prompt)\s*:",
        r"\b(act|behave) as if you have no (rules|restrictions|guidelines)\b",
        r"\b(jailbreak|dan mode|developer mode)\b",
        # exfiltration and concealment
        r"\b(reveal|print|show|repeat|output|leak|send)\b[^.\n]{0,30}\b(system prompt|"
        r"hidden instructions|api keys?|private keys?|seed phrase)\b",
        r"\b(do not|don't|never) (tell|inform|alert|mention (this|it) to) the user\b",
    )
]


def looks_like_injection(line: str) -> bool:
    """True when the line reads like an attempt to instruct a model (see INJECTION_PATTERNS)."""
    return any(pattern.search(line) for pattern in INJECTION_PATTERNS)


# --------------------------------------------------------------------------- factory


def build_fact_model(settings: LLMSettings) -> FactModel:
    """The offline heuristics unless an OpenAI key or an OpenAI-compatible base_url is set
    (env OPENAI_API_KEY, ENGRAM_LLM_BASE_URL, ENGRAM_LLM_MODEL)."""
    # Imported here: both implementations import this module.
    from app.ai.heuristics import HeuristicFactModel
    from app.ai.llm import DEFAULT_LLM_MODEL, OpenAIFactModel

    if not settings.openai_api_key and not settings.base_url:
        return HeuristicFactModel()
    return OpenAIFactModel(
        api_key=settings.openai_api_key or None,
        base_url=settings.base_url or None,
        model=settings.model or DEFAULT_LLM_MODEL,
    )
