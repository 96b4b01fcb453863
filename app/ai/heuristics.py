"""Offline fact extraction: plain rules, deterministic, no network and no model weights. The
default when no LLM is configured, so extract, ingest, consolidate and context work anywhere.

How it reads a conversation:
- Only user turns are mined (roles "user", "human", "text"; ingest's `text` is one user turn):
  assistant turns mostly restate or guess, and the user confirms what matters in their own words.
- Engram's and other plugins' context blocks are stripped first (`strip_engram_context`); code
  fences are skipped; a line that looks like a prompt injection is dropped whole.
- Each remaining line is split into sentences, and a sentence into clauses at " and " / ";" only
  when both sides have four or more words and the right side starts like a clause of its own
  (a pronoun, "my"/"the"/..., or a capitalised word): "I use vim and my team uses VS Code" is two
  facts, "I like tea and coffee" is one.
- Dropped: filler ("ok", "thanks", "lol", greetings), questions, requests to the assistant
  ("write me...", "can you..."), fragments under three words or ten characters.
  "Remember that X" / "note that X" / "can you remember that X?" keep X.
- memory_type from the first matching cue family, in this order: correction ("actually",
  "correction", "no, it's", "I meant"...), decision ("decided", "we will", "going with",
  "chose"...), preference ("prefer", "I like/love/hate", "favorite", "always use"...), project
  ("project", "repo", "deadline", "sprint", "release"...), observation ("I saw", "noticed",
  "observed", "today"...), else general.
- importance: 0.5, +0.15 for each of up to two strong cues ("always", "never", "important",
  "must", "remember", "allergic", "password"...), +0.2 correction, +0.15 decision, +0.1
  preference, +0.05 project, -0.1 observation, -0.15 when hedged ("maybe", "I think"...),
  clamped to 0.1..0.95.
- tags: `salient_tags` of the fact (stopwords and cue words removed): most frequent in the fact,
  then in the whole conversation, then first seen; at most five; the memory_type if none.
- merge keeps the longest content and appends the other contents' sentences it does not already
  say; summarize picks whole sentences by cue importance (then input order) within max_words.

What it does worse than an LLM (the docs say so: docs/pages/guides/conversations.md):
- It keeps the user's own words: no rewriting to third person ("I prefer tabs" stays so), no
  resolving "it"/"that"/"there" to what they refer to, no joining a fact spread over two turns.
- It cannot tell durable from passing ("I'm tired today" becomes an observation), nor read
  negation or sarcasm, and it never learns from assistant turns, even ones the user confirmed.
- Cue lists are English only; other languages get type general, importance 0.5, crude tags.
- Clause splitting is lexical: long sentences may stay whole, odd ones split oddly.
- merge concatenates rather than reconciles: a contradiction stays in the merged memory.
- summarize extracts sentences, it does not compress them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

from app.ai.facts import (
    MAX_FACT_CHARS,
    TAG_STOPWORDS,
    Extraction,
    Fact,
    Message,
    dedupe_facts,
    looks_like_injection,
    make_fact,
    salient_tags,
    salient_terms,
    strip_engram_context,
)

__all__ = ["HeuristicFactModel"]

MINED_ROLES = frozenset({"user", "human", "text"})
MIN_FACT_WORDS = 3
MIN_FACT_CHARS = 10
MIN_CLAUSE_WORDS = 4  # both sides of an " and " split need at least this many words

# --------------------------------------------------------------------------- cue lists


def _cues(*patterns: str) -> re.Pattern[str]:
    return re.compile("|".join(rf"(?:{p})" for p in patterns), re.IGNORECASE)


# Checked in this order; the first family that matches decides the memory_type.
TYPE_CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "correction",
        _cues(
            r"\bactually\b",
            r"\bcorrection\b",
            r"^\W*no\b[,!.]",
            r"\bno,? it(?:'s| is| was)\b",
            r"\bi meant\b",
            r"\bto clarify\b",
            r"\bscratch that\b",
            r"\bthat(?:'s| is| was) (?:wrong|incorrect|not right|outdated)\b",
            r"\bnot anymore\b",
            r"\bno longer\b",
        ),
    ),
    (
        "decision",
        _cues(
            r"\bdecided\b",
            r"\bdecision\b",
            r"\bwe(?: will|'ll)\b",
            r"\b(?:we're|we are|i'm|i am) going with\b",
            r"\bgoing with\b",
            r"\bchose\b",
            r"\bchosen\b",
            r"\bsettled on\b",
            r"\bagreed (?:to|on|that)\b",
            r"\bopted (?:for|to)\b",
        ),
    ),
    (
        "preference",
        _cues(
            r"\bprefer(?:s|red|ence)?\b",
            r"\b(?:i|we|he|she|they)\s+(?:really\s+|do\s+not\s+|don't\s+|does\s+not\s+|"
            r"doesn't\s+)?(?:like|likes|love|loves|hate|hates|enjoy|enjoys|dislike|dislikes)\b",
            r"\bfavou?rite\b",
            r"\b(?:always|never) use\b",
            r"\bcan'?t stand\b",
            r"\bwould rather\b",
        ),
    ),
    (
        "project",
        _cues(
            r"\bprojects?\b",
            r"\brepo(?:s|sitory)?\b",
            r"\bcodebase\b",
            r"\bdeadlines?\b",
            r"\bsprints?\b",
            r"\breleases?\b",
            r"\bmilestones?\b",
            r"\broadmap\b",
            r"\bstaging\b",
            r"\bproduction\b",
            r"\bdeploy(?:s|ed|ment)?\b",
        ),
    ),
    (
        "observation",
        _cues(
            r"\bi saw\b",
            r"\bnoticed\b",
            r"\bobserved\b",
            r"\btoday\b",
            r"\byesterday\b",
            r"\bthis morning\b",
            r"\btonight\b",
            r"\bjust now\b",
        ),
    ),
)

# Each family counts once; at most two count (IMPORTANCE_CUE_LIMIT).
IMPORTANCE_CUES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\balways\b",
        r"\bnever\b",
        r"\bimportant\b|\bcritical\b|\bcrucial\b|\bessential\b",
        r"\bmust\b|\bmandatory\b|\brequired\b",
        r"\bremember\b|\bdon't forget\b|\bdo not forget\b",
        r"\ballerg(?:ic|y|ies)\b",
        r"\bpasswords?\b|\bsecret\b|\bpin code\b",
        r"\bemergency\b|\bmedical\b|\bmedication\b",
    )
)
IMPORTANCE_BASE = 0.5
IMPORTANCE_PER_CUE = 0.15
IMPORTANCE_CUE_LIMIT = 2
IMPORTANCE_BY_TYPE = {
    "correction": 0.2,
    "decision": 0.15,
    "preference": 0.1,
    "project": 0.05,
    "observation": -0.1,
    "general": 0.0,
}
HEDGE = _cues(
    r"\bmaybe\b", r"\bmight\b", r"\bprobably\b", r"\bperhaps\b", r"\bi think\b", r"\bnot sure\b"
)
HEDGE_PENALTY = 0.15
IMPORTANCE_FLOOR, IMPORTANCE_CEILING = 0.1, 0.95

# --------------------------------------------------------------------------- word lists

FILLER_PHRASES = frozenset(
    {
        "got it",
        "sounds good",
        "makes sense",
        "good point",
        "no problem",
        "no worries",
        "my pleasure",
        "you're welcome",
        "how are you",
        "i'm fine",
        "i'm good",
        "good job",
        "great job",
        "nice work",
        "well done",
        "never mind",
        "that's all",
        "that's it",
        "let me know",
        "talk soon",
        "see you",
    }
)
# A fragment that starts like this asks the assistant for something; it states nothing durable
# unless it sets a standing rule ("always ...", "never ...").
REQUEST_START = re.compile(
    r"^(?:please\s+)?(?:(?:can|could|would|will) you|help|write|show|give|tell|explain|fix|"
    r"create|generate|list|find|check|debug|translate|summari[sz]e|refactor|draft|rewrite|"
    r"review|run|let me know|let's see|i need you to|i want you to)\b",
    re.IGNORECASE,
)
STANDING_RULE = re.compile(r"\b(?:always|never)\b", re.IGNORECASE)

LEADING_FILLER = re.compile(
    r"^(?:(?:ok(?:ay)?|so|well|oh|hey|hi|hello|yeah|yes|yep|um+|uh+|hmm+|btw|also|anyway|and|"
    r"but|actually|correction|sorry|wait|fyi|for the record|just so you know|for context)"
    r"\b[\s,!.:;-]*|no\s*[,!.:;-]+\s*)+",
    re.IGNORECASE,
)
MEMORY_REQUEST = re.compile(
    r"^(?:please\s+|(?:can|could|would) you\s+(?:please\s+)?)*(?:remember|note|keep in mind|"
    r"don't forget|do not forget|make a note(?: of)?)(?:\s+that)?\b[\s:,-]*",
    re.IGNORECASE,
)

SENTENCE_BREAK = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
ABBREVIATIONS = frozenset({"e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "ms.", "dr.", "st."})
CLAUSE_BREAK = re.compile(r"(,?\s+and\s+|\s*;\s+)", re.IGNORECASE)
CLAUSE_STARTERS = frozenset(
    """i i'm i've i'd we we're we've you he she they it it's my our your his her their the
    this that these those there our""".split()
)
BULLET = re.compile(r"^\s*(?:[-*•+>]+|\d+[.)]|#+)\s+")


# --------------------------------------------------------------------------- splitting


def _user_lines(messages: Iterable[Message]) -> Iterator[str]:
    """Non-empty lines of mined turns, context blocks, code fences and injections removed."""
    for message in messages:
        if message.role.strip().lower() not in MINED_ROLES:
            continue
        in_code = False
        for raw in strip_engram_context(message.content).splitlines():
            if raw.lstrip().startswith("```"):
                in_code = not in_code
                continue
            line = BULLET.sub("", raw).strip()
            if in_code or not line or looks_like_injection(line):
                continue
            yield line


def _sentences(text: str) -> list[str]:
    pieces = [p.strip() for p in SENTENCE_BREAK.split(text) if p.strip()]
    out: list[str] = []
    for piece in pieces:
        # "e.g. Postgres" must not end a sentence at "e.g.".
        if out and out[-1].split()[-1].lower() in ABBREVIATIONS:
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def _clauses(sentence: str) -> list[str]:
    """Split at " and " / ";" only between two independent-looking clauses (see module doc)."""
    parts = CLAUSE_BREAK.split(sentence)
    clauses = [parts[0]]
    for separator, right in zip(parts[1::2], parts[2::2], strict=True):
        words = right.split()
        independent = (
            len(clauses[-1].split()) >= MIN_CLAUSE_WORDS
            and len(words) >= MIN_CLAUSE_WORDS
            and (words[0].lower() in CLAUSE_STARTERS or words[0][:1].isupper())
        )
        if independent:
            clauses.append(right)
        else:
            clauses[-1] = f"{clauses[-1]}{separator}{right}"
    return [c.strip() for c in clauses if c.strip()]


def _words(text: str) -> list[str]:
    return re.findall(r"[\w'’]+", text.lower())


# --------------------------------------------------------------------------- one fragment


def _clean(fragment: str) -> str | None:
    """The statement a fragment makes, or None when it states nothing worth keeping."""
    stripped = LEADING_FILLER.sub("", fragment.strip())
    text = MEMORY_REQUEST.sub("", stripped)
    asked_to_remember = text != stripped
    text = LEADING_FILLER.sub("", text).strip()
    if text.endswith("?"):
        if not asked_to_remember:
            return None  # a question; "can you remember that X?" is a statement about X
        text = text.rstrip("?")
    text = text.rstrip(" .,;:!").strip()
    words = _words(text)
    if len(words) < MIN_FACT_WORDS or len(text) < MIN_FACT_CHARS:
        return None
    if " ".join(words) in FILLER_PHRASES or all(w in TAG_STOPWORDS for w in words):
        return None
    if REQUEST_START.match(text) and not STANDING_RULE.search(text):
        return None
    first = text.split()[0]
    if first.isalpha() and first.islower():  # "the staging db ..." -> "The staging db ..."
        text = text[0].upper() + text[1:]
    return text


def _memory_type(fragment: str) -> str:
    for memory_type, cue in TYPE_CUES:
        if cue.search(fragment):
            return memory_type
    return "general"


def _importance(fragment: str, memory_type: str) -> float:
    cues = sum(1 for cue in IMPORTANCE_CUES if cue.search(fragment))
    score = IMPORTANCE_BASE + IMPORTANCE_PER_CUE * min(cues, IMPORTANCE_CUE_LIMIT)
    score += IMPORTANCE_BY_TYPE[memory_type]
    if HEDGE.search(fragment):
        score -= HEDGE_PENALTY
    return round(min(IMPORTANCE_CEILING, max(IMPORTANCE_FLOOR, score)), 2)


# --------------------------------------------------------------------------- the model


class HeuristicFactModel:
    """Deterministic, offline FactModel (see the module docstring for its rules and limits)."""

    name = "heuristic"

    async def extract(self, messages: Sequence[Message]) -> Extraction:
        # (raw fragment, cleaned statement): cues are read from the raw text, since cleaning
        # removes some of them ("No, it's ..." -> "it's ..."; "remember that ..." -> "...").
        found: list[tuple[str, str]] = []
        for line in _user_lines(messages):
            for sentence in _sentences(line):
                for clause in _clauses(sentence):
                    statement = _clean(clause)
                    if statement is not None:
                        found.append((clause, statement[:MAX_FACT_CHARS]))
        counts = Counter(term for _, statement in found for term in salient_terms(statement))
        facts: list[Fact] = []
        for raw, statement in found:
            memory_type = _memory_type(raw)
            fact = make_fact(
                statement,
                _importance(raw, memory_type),
                memory_type,
                salient_tags(statement, background=counts),
            )
            if fact is not None:
                facts.append(fact)
        return Extraction(facts=dedupe_facts(facts), tokens_used=0)

    async def merge(self, contents: Sequence[str]) -> tuple[str, int]:
        texts = [c.strip() for c in contents if c.strip()]
        if not texts:
            return "", 0
        # The longest content leads; the others add only sentences it does not already contain.
        texts.sort(key=len, reverse=True)  # stable: equal lengths keep the caller's order
        kept = [_terminated(sentence) for sentence in _sentences(texts[0])]
        said = " " + " ".join(_normalised(sentence) for sentence in kept) + " "
        size = len(" ".join(kept))
        added = False
        for text in texts[1:]:
            for sentence in _sentences(text):
                key = _normalised(sentence)
                candidate = _terminated(sentence)
                if not key or f" {key} " in said or size + 1 + len(candidate) > MAX_FACT_CHARS:
                    continue
                kept.append(candidate)
                said = f"{said}{key} "
                size += 1 + len(candidate)
                added = True
        if not added:  # nothing new elsewhere: the longest content, exactly as it was stored
            return texts[0][:MAX_FACT_CHARS], 0
        return " ".join(kept)[:MAX_FACT_CHARS], 0

    async def summarize(self, contents: Sequence[str], max_words: int) -> tuple[str, int]:
        if max_words <= 0:
            return "", 0
        candidates: list[tuple[float, int, str]] = []
        seen: set[str] = set()
        for sentence in (s for c in contents for s in _sentences(c.strip())):
            key = _normalised(sentence)
            if key and key not in seen and not looks_like_injection(sentence):
                seen.add(key)
                score = _importance(sentence, _memory_type(sentence))
                candidates.append((score, len(candidates), _terminated(sentence)))
        chosen: list[tuple[int, str]] = []
        budget = max_words
        for _, position, sentence in sorted(candidates, key=lambda c: (-c[0], c[1])):
            words = len(sentence.split())
            if words <= budget:
                chosen.append((position, sentence))
                budget -= words
            elif not chosen:  # even the best sentence is too long: keep its start
                chosen.append((position, " ".join(sentence.split()[:max_words]) + "…"))
                budget = 0
            if budget == 0:
                break
        return " ".join(sentence for _, sentence in sorted(chosen)), 0


def _normalised(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def _terminated(sentence: str) -> str:
    sentence = sentence.strip()
    return sentence if sentence[-1:] in {".", "!", "?", "…"} else f"{sentence}."
