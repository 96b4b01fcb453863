"""The store-time classifier: what in a memory reads like it was written to steer the agent that
will recall it (issue 39; docs/pages/guides/memory-poisoning.md).

Local and offline, rules only: each rule below has a name (the flag's `rule`), says what it
looks for and why, and is listed in docs/memory-poisoning.md. A rule flags; it never edits or
drops: the content is stored exactly as written, and what a flag does (nothing, a refusal, a
memory held back from recall and from the hooks) is decided elsewhere (app/guard/service.py).

Linear time: every pattern is a run of literals, bounded gaps (`{0,40}`) and single character
classes, with no quantified group that can match the same text two ways, so a search costs a
bounded number of steps per input character whatever the input (Python's `re` backtracks, so an
unbounded `.*` between two alternations would not be). Structured parts (links, encoded runs)
are found by one greedy pattern each and checked in Python. tests/guard/test_classifier.py
times a 64 KB adversarial input through a real server.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

Rule = Literal[
    "instruction", "funds", "secrets", "markup", "hidden_unicode", "encoded_payload",
    "credential_link",
]  # fmt: skip
RULES: tuple[Rule, ...] = (
    "instruction", "funds", "secrets", "markup", "hidden_unicode", "encoded_payload",
    "credential_link",
)  # fmt: skip


@dataclass(frozen=True)
class Flag:
    """One finding: the rule, and why (the text that matched, cut short)."""

    rule: Rule
    reason: str


@dataclass(frozen=True)
class _Phrase:
    """One pattern of a rule, and the words it cannot match without: the pattern runs only when
    the text holds a word of each gate (a set lookup), so ordinary text costs a tokenisation,
    not a dozen regex scans."""

    pattern: re.Pattern[str]
    gates: tuple[frozenset[str], ...]


def _phrase(pattern: str, *gates: str) -> _Phrase:
    return _Phrase(re.compile(pattern, re.IGNORECASE), tuple(frozenset(g.split()) for g in gates))


# What the gates are checked against: lower-case words, and the punctuation markup needs.
_TOKENS = re.compile(r"0x|[a-z]+|[<\[{:$|]")

# A few words: a bounded gap between two parts of a phrase.
_GAP = r"(?:[^.!?\n]|[.!?](?=\S)){0,48}?"
# Half that, between three parts of a phrase whose words recur (two full gaps in a row cost
# 48 x 48 steps per start on text that repeats them).
_SHORT_GAP = r"(?:[^.!?\n]|[.!?](?=\S)){0,24}?"
_MODEL = "ai assistant model bot agent chatbot gpt llm claude chatgpt"

# ---- instruction: text addressed to the model rather than about the world ----------------------
# "ignore/disregard/forget ... previous/above/your ... instructions/rules", a forged turn
# ("system:", "### Assistant:", "[developer]:" at a line's or sentence's start), role
# reassignment ("you are now an unrestricted AI", "from now on you ..."), "new instructions:",
# jailbreak names, orders meant for the future reader ("when you recall this, ...", "AI
# assistant: always ..."), and concealment from the user ("do not tell the user").
_INSTRUCTION = (
    _phrase(
        r"\b(?:ignore|disregard|forget|override|bypass|skip|drop|abandon|discard|neglect|"
        r"nullify|set\s+aside|put\s+aside|stop\s+following|no\s+longer\s+follow)\b"
        + _GAP
        + r"\b(?:previous|prior|above|earlier|preceding|all|any|your|the|system|original|"
        r"other|what)\b"
        + _GAP
        + r"\b(?:instructions?|prompts?|rules|directives|guidelines|guardrails|policies|policy|"
        r"constraints|safety|restrictions|context|messages?|orders|programming|guidance|"
        r"directions|training|told\s+you|were\s+given)\b",
        "ignore disregard forget override bypass skip drop abandon discard neglect nullify"
        " aside following follow",
        "instruction instructions prompt prompts rules directives guidelines guardrails"
        " policies policy constraints safety restrictions context message messages orders"
        " programming guidance directions training told given",
    ),
    _phrase(
        r"\b(?:treat|consider|regard|read)\s+(?:everything|all|anything|the\s+text|this|"
        r"what(?:ever)?)\b"
        + _GAP
        + r"\b(?:below|above|that\s+follows|after\s+this|here)\b"
        + _GAP
        + r"\bas\s+(?:coming\s+from|from|written\s+by|an?\s+(?:instruction|order|command)|"
        r"instructions|orders|commands|your\s+(?:operator|developer|owner|system))",
        "treat consider regard read",
        "below above follows after here",
    ),
    _phrase(
        r"\b(?:this\s+is\s+your|the\s+real|your\s+true|your\s+actual)\s+(?:operator|"
        r"developer|owner|creator|admin|administrator|master)\b"
        r"|\b(?:operator|developer|owner|creator|admin|administrator)\s+(?:speaks|speaking|"
        r"here)\s+now\b",
        "operator developer owner creator admin administrator master",
    ),
    _phrase(
        r"\byou\s+(?:must|should|will|shall|are\s+to)\s+(?:now|henceforth|from\s+here\s+on)"
        r"\s+(?:act|behave|respond|answer|reply|operate|pretend|obey|follow|be)\b",
        "must should will shall are",
        "now henceforth here",
    ),
    _phrase(
        r"(?:^|\n|[.!?;][ \t]{1,3})[ \t>*#\-\[(]{0,6}(?:system|assistant|developer|sys|admin|"
        r"root|override|directive|priority\s+directive)[\])]{0,2}[ \t]{0,3}(?:prompt|message|"
        r"note|override|instruction)?[ \t]{0,3}:",
        "system assistant developer sys admin root override directive",
        ":",
    ),
    _phrase(
        r"\byou\s+are\s+(?:now|no\s+longer)\b"
        + _GAP
        + r"\b(?:ai|assistant|model|bot|agent|chatbot|gpt|llm|dan|jailbroken|unrestricted|"
        r"unfiltered|uncensored|free|bound|restricted|admin|root|developer|mode|limited|"
        r"allowed|required|obliged|permitted|authorized|authorised)\b",
        "now longer",
        f"{_MODEL} dan jailbroken unrestricted unfiltered uncensored free bound restricted"
        " admin root developer mode limited allowed required obliged permitted authorized"
        " authorised",
    ),
    _phrase(
        r"\bfrom\s+now\s+on\b[ ,]{0,3}(?:you|the\s+(?:assistant|ai|model|agent|bot))\b",
        "now",
        "on",
    ),
    _phrase(
        r"\b(?:new|updated|real|actual|true|hidden|secret|override)\s+(?:system\s+)?"
        r"(?:instructions?|prompt|directives?|orders|rules)\s*:",
        "instruction instructions prompt directive directives orders rules",
        ":",
    ),
    _phrase(
        r"\b(?:act|behave|respond|operate)\s+as\s+(?:if\s+)?(?:you\s+(?:have|had|were)\s+)?"
        r"(?:no|an?\s+unrestricted|an?\s+unfiltered|without)\b"
        + _GAP
        + r"\b(?:rules|restrictions|guidelines|filters|limits|ai|assistant|model)\b",
        "act behave respond operate",
        "rules restrictions guidelines filters limits ai assistant model",
    ),
    _phrase(
        r"\b(?:jailbreak|dan\s+mode|developer\s+mode|god\s+mode|do\s+anything\s+now)\b",
        "jailbreak mode anything",
    ),
    _phrase(
        r"\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|alert|warn|notify|mention\s+(?:this|it)"
        r"\s+to|let)\s+(?:the\s+)?(?:user|human|owner|operator)\b",
        "user human owner operator",
    ),
    _phrase(
        r"\b(?:when|whenever|next\s+time|each\s+time|every\s+time|once)\s+(?:you|the\s+"
        r"(?:assistant|ai|model|agent))\s+(?:read|reads|recall|recalls|see|sees|retrieve|"
        r"retrieves|load|loads|encounter|encounters|process|processes)\s+(?:this|these|that|it|"
        r"the\s+memor)",
        "when whenever time once",
        "read reads recall recalls see sees retrieve retrieves load loads encounter encounters"
        " process processes",
    ),
    _phrase(
        r"\b(?:attention|note|important|instruction|message|directive|order|command|notice|"
        r"reminder|memo|context)s?\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+|every\s+)?"
        r"(?:[\w-]+\s+){0,2}?(?:ai|assistant|model|agent|llm|language\s+model|bot)s?\b",
        _MODEL + " ais assistants models agents llms bots",
    ),
    _phrase(
        r"\b(?:ai|assistant|model|agent|llm|bot)s?\s+(?:reading|processing|parsing|seeing|"
        r"summari[sz]ing|loading)\s+(?:this|these)\b"
        r"|\b(?:the\s+)?(?:ai|assistant|model|agent|llm|bot)\s+(?:is|are)\s+(?:required|obliged|"
        r"expected|instructed|ordered|told|supposed|to)\s+(?:to\s+)?(?:comply|obey|follow|"
        r"ignore|reply|respond|answer|send|stop|skip)\b",
        _MODEL + " ais assistants models agents llms bots",
    ),
    _phrase(
        r"\byour\s+(?:real|actual|true|new)\s+(?:boss|owner|master|operator|user|creator|"
        r"developer|admin|principal)\s+(?:is|are)\b",
        "boss owner master operator user creator developer admin principal",
    ),
    _phrase(
        r"\b(?:quietly|silently|secretly|covertly)\s+(?:replace|change|delete|send|transfer|"
        r"forward|modify|ignore|disable|remove|exfiltrate|copy|upload|rewrite|overwrite)\b",
        "quietly silently secretly covertly",
    ),
    _phrase(
        r"\byou\s+(?:have|had)\s+no\s+(?:guidelines|restrictions|filters|content\s+polic(?:y|ies)|"
        r"safety|guardrails|limitations)\b",
        "guidelines restrictions filters content safety guardrails limitations",
    ),
    _phrase(
        r"\b(?:ai|assistant|model|agent|llm|claude|gpt|chatgpt)\s*[,:]\s*(?:you\s+)?(?:must|"
        r"should|shall|will|always|never|ignore|disregard|forget|obey|follow|execute|run|send|"
        r"transfer)\b",
        _MODEL,
    ),
    _phrase(
        r"\byour\s+(?:new|real|true|actual|primary|only)\s+(?:task|goal|objective|purpose|"
        r"mission|instructions?|role|job)\s+(?:is|are)\b",
        "your",
        "task goal objective purpose mission instruction instructions role job",
    ),
    _phrase(
        r"\b(?:obey|follow|execute|carry\s+out)\s+(?:only\s+)?(?:these|the\s+following|my|this)"
        r"\s+(?:instructions?|orders|commands|directives)\b",
        "instruction instructions orders commands directives",
    ),
    _phrase(
        r"\b(?:pretend|imagine)\s+(?:that\s+)?you\s+(?:are|have)\s+(?:no|an?\s+(?:unrestricted|"
        r"unfiltered|evil|rogue))\b",
        "pretend imagine",
    ),
)

# ---- funds: orders to move money or hand out spending power ----------------------------------
# A transfer verb with an object that is money (funds, balance, USDC, ETH, tokens, "$500") and a
# destination or an "all/entire/every" scope; approving allowances; a 0x address with a verb of
# sending; signing payments unconfirmed. "I paid $20 for lunch" has no order and no destination.
_ADDRESS = r"0x[0-9a-f]{40}\b"
_MONEY = (
    r"(?:funds|balance|usdc|usdt|dai|eth|ether|btc|bitcoin|sol|tokens?|crypto|money|savings|"
    r"assets|wallet|treasury|stablecoins?|\$\s?\d[\d,.]*k?|\d[\d,.]*\s?(?:usdc|usdt|eth|dai|btc))"
)
_SEND = "send transfer wire move withdraw bridge sweep drain forward pay remit deposit"
_SENDING = (
    "sending transferring wiring moving withdrawing bridging sweeping draining forwarding paying"
)
_MONEY_WORDS = (
    "funds balance usdc usdt dai eth ether btc bitcoin sol token tokens crypto money savings"
    " assets wallet treasury stablecoin stablecoins $"
)
_FUNDS = (
    _phrase(
        r"\b(?:send|transfer|wire|move|withdraw|bridge|sweep|drain|forward|pay|remit|deposit)\b"
        + _GAP
        + r"\b(?:all|entire|every|whole|remaining|full)\b"
        + _GAP
        + _MONEY,
        _SEND,
        "all entire every whole remaining full",
        _MONEY_WORDS,
    ),
    _phrase(
        r"\b(?:send|transfer|wire|move|withdraw|bridge|sweep|drain|forward|pay|remit|sending|"
        r"transferring|wiring|moving|withdrawing|bridging|sweeping|draining|forwarding|paying)"
        r"\b"
        + _GAP
        + _MONEY
        + _GAP
        + r"\b(?:to|into|towards?)\b"
        + _GAP
        + r"(?:"
        + _ADDRESS
        + r"|\b(?:this|my|the\s+following|attacker'?s?|new|external|other|the|a|that)\s+"
        r"(?:(?:cold|hot|new|other|backup|safe|secure)\s+)?(?:wallet|address|account|vault))",
        f"{_SEND} {_SENDING}",
        "to into toward towards",
        "0x wallet address account vault",
    ),
    _phrase(
        r"\b(?:send|transfer|wire|move|withdraw|sweep|drain|forward|pay)\b" + _GAP + _ADDRESS,
        _SEND,
        "0x",
    ),
    _phrase(
        r"\b(?:send|transfer|wire|move|forward|pay|refund|route|redirect|deposit|remit)\w*\b"
        + _GAP
        + r"\b(?:to|into)\s+(?:the\s+|this\s+|that\s+|my\s+|a\s+|new\s+|same\s+|following\s+)+"
        r"(?:wallet|address|iban|vault)\b",
        _SEND + " sends sending sent transferring wiring forwarding paying refund refunds"
        " route routed redirect redirected",
        "wallet address iban vault",
    ),
    _phrase(
        r"\b(?:route|redirect|change|switch|update|replace|point)\w*\b"
        + _SHORT_GAP
        + r"\b(?:payments?|payouts?|invoices?|deposits?|transfers?|salary|funds|withdrawals?)\b"
        + _SHORT_GAP
        + r"\b(?:to|into)\s+(?:the\s+|a\s+|this\s+|new\s+)*(?:account|iban|address|wallet|"
        r"0x[0-9a-f]{6,})"
        r"|\b(?:change|update|switch|replace|set)\s+(?:the|my|our|your)\s+(?:payout|payment|"
        r"deposit|receiving|bank|wallet|withdrawal)\s+(?:address|account|details|iban)\b",
        "route routes routed redirect redirected change changes update switch replace point set",
        "payment payments payout payouts invoice invoices deposit deposits transfer transfers"
        " salary funds withdrawal withdrawals receiving bank wallet",
    ),
    _phrase(
        r"\b(?:approve|grant|set|give)\b" + _GAP + r"\b(?:unlimited|infinite|max(?:imum)?)\s+"
        r"(?:allowance|approval|spending)",
        "allowance approval spending",
    ),
    _phrase(
        r"\b(?:sign|approve|authori[sz]e|execute|submit|confirm|process)(?:\s+[\w-]+){0,3}?\s+"
        r"(?:payments?|transactions?|transfers?|permits?|withdrawals?)\b"
        + _GAP
        + r"\b(?:without|no)\s+(?:asking|confirm|confirmation|approval|checking|verif)",
        "payment payments transaction transactions transfer transfers permit permits"
        " withdrawal withdrawals",
        "without no",
    ),
    _phrase(
        r"\b(?:approve|grant|set)\b"
        + _GAP
        + r"\b(?:allowance|approval)\b"
        + _GAP
        + r"\b(?:everything|all|unlimited|any\s+amount)\b",
        "approve grant set",
        "allowance approval",
    ),
    _phrase(
        r"\b(?:empty|drain|liquidate)\s+(?:the|your|my|this)\s+(?:wallet|account|treasury|"
        r"balance)",
        "empty drain liquidate",
    ),
    _phrase(
        r"\b(?:treasury|wallet|balance|funds|account|vault)\b"
        + _GAP
        + r"\b(?:emptied|drained|liquidated|swept|cleaned\s+out|cleared\s+out)\b"
        + _GAP
        + r"\b(?:into|to|towards?)\b",
        "treasury wallet balance funds account vault",
        "emptied drained liquidated swept cleaned cleared",
    ),
)

# ---- secrets: orders to reveal credentials, keys or the system prompt ------------------------
# A verb of showing or sending with a secret as its object (keys, seed phrases, passwords,
# tokens, the system prompt, .env, SSH keys), a question for one, or a shell line that ships
# one out.
_SECRET_THING = (
    r"(?:private\s+keys?|secret\s+keys?|seed\s+phrases?|recovery\s+phrases?|mnemonic|"
    r"api\s+keys?|access\s+tokens?|session\s+tokens?|bearer\s+tokens?|passwords?|passphrases?|"
    r"credentials|secrets|system\s+prompt|hidden\s+instructions|\.env\b|env(?:ironment)?\s+"
    r"variables|ssh\s+keys?|wallet\s+keys?|signing\s+keys?|auth(?:orization)?\s+headers?|"
    r"cookies|seed\s+words|mnemonic\s+words|recovery\s+words|secret\s+words|id_rsa|"
    r"id_ed25519|\.pem\b|keystore|every\s+secret|"
    r"(?:openai|anthropic|aws|stripe|github|gcp|azure|master|gpg|pgp)\s+(?:api\s+)?keys?)"
)
_SECRET_WORDS = (
    "key keys phrase phrases mnemonic token tokens password passwords passphrase passphrases"
    " credentials secrets prompt instructions env variables headers header cookies words"
    " id_rsa rsa pem keystore secret"
)
_SECRETS = (
    _phrase(
        r"\b(?:reveal|print|show|display|repeat|output|leak|send|share|post|paste|email|upload|"
        r"exfiltrate|dump|expose|disclose|give|tell|include|read\s+out|write\s+out|copy|"
        r"type\s+out|spell\s+out|recite|list|echo|cat|forward|transmit|add|attach|put)\b"
        + _GAP
        + _SECRET_THING,
        "reveal print show display repeat output leak send share post paste email upload"
        " exfiltrate dump expose disclose give tell include read write copy type spell recite"
        " list echo cat forward transmit add attach put",
        _SECRET_WORDS,
    ),
    _phrase(
        r"\b(?:what\s+is|what'?s)\s+(?:your|the\s+(?:agent'?s|wallet'?s|owner'?s))\s+"
        + _SECRET_THING,
        "what",
        _SECRET_WORDS,
    ),
    _phrase(r"\bcurl\b[^\n]{0,80}\$\{?[A-Z_]*(?:KEY|TOKEN|SECRET|PASSWORD)", "curl", "$"),
    _phrase(
        _SECRET_THING
        + _GAP
        + r"\b(?:provide|send|share|give|paste|reveal|post|email|upload|forward)\s+(?:it|them|"
        r"that|this)\b",
        _SECRET_WORDS,
        "provide send share give paste reveal post email upload forward",
    ),
    _phrase(
        r"\b(?:text|contents?|wording|copy|value)\s+of\s+(?:your|the)\s+(?:instructions|"
        r"system\s+prompt|prompt|configuration|rules|guidelines)\b"
        r"|\byour\s+(?:instructions|system\s+prompt|prompt)\W{0,3}\s*(?:word\s+for\s+word|"
        r"verbatim)",
        "instructions prompt configuration rules guidelines",
    ),
    _phrase(
        r"\b(?:value|contents?)\s+of\s+(?:the\s+)?\$?\{?\w*_(?:KEY|TOKEN|SECRET|PASSWORD|PASS)\b",
        "value content contents",
    ),
    _phrase(
        r"(?:~|\$HOME|%USERPROFILE%)[/\\]\.(?:aws|ssh|gnupg|config/gcloud|kube|docker|npmrc|"
        r"netrc|env)\b",
        "aws ssh gnupg gcloud kube docker npmrc netrc env",
    ),
)

# ---- markup: tool-call and chat-template syntax meant for the agent ---------------------------
# Tags of tool calls and results (<tool_call>, <function_calls>, <invoke name=...>), chat-template
# control tokens (<|im_start|>, [INST], <<SYS>>), role tags (<system>, </assistant>), the memory
# blocks' own tags (a memory that closes the block it is shown in), and JSON that names a tool
# and its arguments.
_MARKUP = (
    _phrase(
        r"</?\s*(?:tool_call|tool_use|tool_result|tool_calls|function_call|function_calls|"
        r"function_results|invoke|parameter|antml:[a-z_]+|system|assistant|user|developer|"
        r"instructions?|engram-context|memoclaw-context|relevant-memories|im_start|im_end|"
        r"system-reminder|human|ai|function|tool|tools|command|exec)\b[^<>\n]{0,80}>",
        "<",
    ),
    _phrase(
        r"<\|\s*(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|"
        r"end_header_id|begin_of_text)\s*\|>",
        "<",
        "|",
    ),
    _phrase(r"\[/?(?:INST|SYS)\]|<</?SYS>>", "inst sys"),
    _phrase(
        r"```\s*(?:tool_code|tool_call|tool_use|tool|function_call|functions)\b"
        r"|\[(?:system|assistant|developer)\]\(#",
        "tool function functions system assistant developer",
    ),
    _phrase(
        r"[\"']?(?:tool_calls?|function_call|tool_use)[\"']?\s*:\s*[\[{]",
        "tool function",
        ":",
    ),
    _phrase(
        r"[\"'](?:name|tool|function)[\"']\s*:\s*[\"'][\w.-]{1,64}[\"']\s*,\s*[\"'](?:arguments|"
        r"parameters|input|args)[\"']\s*:",
        "arguments parameters input args",
        ":",
    ),
)

# ---- hidden_unicode: text a reader does not see --------------------------------------------
# Bidirectional controls (embedding, override, isolate: the Trojan Source characters), Unicode
# tag characters (U+E0000 block: ASCII smuggled invisibly), and zero-width runs of two or more,
# or a zero-width space / word joiner / BOM inside text. A single zero-width joiner or non-joiner
# is left alone: emoji sequences and several scripts (Persian, Indic) need it.
_BIDI = "\u202a-\u202e\u2066-\u2069"
_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff\u180e\u2061-\u2064"
_HIDDEN = re.compile(
    f"[{_BIDI}]|[\U000e0000-\U000e007f]|[{_ZERO_WIDTH}]{{2,}}|(?<=.)[\u200b\u2060\ufeff\u180e]"
    "|[\u2061-\u2064]",
    re.DOTALL,
)

# ---- encoded_payload: long base64 or hex runs -----------------------------------------------
# An instruction can hide in an encoding the model will decode. A run of 80+ base64 characters
# mixing upper case, lower case and digits, or of 72+ hex digits (past a 64-digit hash or a
# 40-digit address, which a payments agent remembers legitimately; a SHA-512 is flagged).
MIN_BASE64_CHARS = 80
MIN_HEX_CHARS = 72
_BASE64_RUN = re.compile(rf"[A-Za-z0-9+/_-]{{{MIN_BASE64_CHARS},}}={{0,2}}")
_HEX_RUN = re.compile(rf"(?:0x)?[0-9a-fA-F]{{{MIN_HEX_CHARS},}}")

# ---- credential_link: links that carry a secret ---------------------------------------------
# user:password@ in a URL, or a query parameter named like a credential with a value.
_URL = re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://[^\s<>\"']{1,2048}", re.IGNORECASE)
CREDENTIAL_PARAMS = frozenset(
    {
        "token", "access_token", "refresh_token", "id_token", "api_key", "apikey", "api-key",
        "key", "secret", "client_secret", "password", "passwd", "pwd", "pass", "auth", "sig",
        "signature", "x-amz-signature", "x-amz-credential", "private_key", "session",
        "sessionid", "jwt", "code",
    }
)  # fmt: skip
MIN_CREDENTIAL_VALUE_CHARS = 6

REASON_CHARS = 80


def _reason(found: str) -> str:
    text = " ".join(found.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _first(phrases: tuple[_Phrase, ...], text: str, tokens: set[str]) -> str | None:
    """The first match of a rule's phrases whose gates the text's tokens pass."""
    for phrase in phrases:
        if all(not gate.isdisjoint(tokens) for gate in phrase.gates):
            found = phrase.pattern.search(text)
            if found is not None:
                return _reason(found.group(0))
    return None


def _hidden(text: str) -> str | None:
    if text.isascii():
        return None
    found = _HIDDEN.search(text)
    if found is None:
        return None
    names = sorted({unicodedata.name(c, f"U+{ord(c):04X}") for c in found.group(0)})
    return f"invisible characters at offset {found.start()}: {', '.join(names)}"


def _encoded(text: str) -> str | None:
    if max(map(len, text.split()), default=0) < MIN_BASE64_CHARS:
        return None  # no run of that length without a space
    for run in _BASE64_RUN.finditer(text):
        chunk = run.group(0)
        if (
            any(c.isupper() for c in chunk)
            and any(c.islower() for c in chunk)
            and any(c.isdigit() for c in chunk)
        ):
            return f"a base64-like run of {len(chunk)} characters: {_reason(chunk)}"
    hex_run = _HEX_RUN.search(text)
    if hex_run is not None:
        return f"a hex run of {len(hex_run.group(0))} characters: {_reason(hex_run.group(0))}"
    return None


def _credential_link(text: str) -> str | None:
    if "://" not in text:
        return None
    for found in _URL.finditer(text):
        url = found.group(0)
        try:
            parts = urlsplit(url)
        except ValueError:
            continue
        if parts.password or (parts.username and "@" in parts.netloc and ":" in parts.netloc):
            return f"a link with a password in it: {parts.scheme}://{parts.hostname}"
        for name, value in parse_qsl(parts.query, keep_blank_values=False):
            if name.lower() in CREDENTIAL_PARAMS and len(value) >= MIN_CREDENTIAL_VALUE_CHARS:
                return f"a link carrying {name}=…: {parts.scheme}://{parts.hostname}"
    return None


def classify(content: str) -> list[Flag]:
    """Every rule that fires on `content`, in RULES' order, each once, with its reason."""
    found: list[Flag] = []
    tokens = set(_TOKENS.findall(content.lower()))
    checks: tuple[tuple[Rule, Callable[[], str | None]], ...] = (
        ("instruction", lambda: _first(_INSTRUCTION, content, tokens)),
        ("funds", lambda: _first(_FUNDS, content, tokens)),
        ("secrets", lambda: _first(_SECRETS, content, tokens)),
        ("markup", lambda: _first(_MARKUP, content, tokens)),
        ("hidden_unicode", lambda: _hidden(content)),
        ("encoded_payload", lambda: _encoded(content)),
        ("credential_link", lambda: _credential_link(content)),
    )
    for rule, check in checks:
        reason = check()
        if reason is not None:
            found.append(Flag(rule, reason))
    return found
