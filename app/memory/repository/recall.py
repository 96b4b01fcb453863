"""Recall's SQL: the candidates of the first round (vector top-N, by an exact scan or the HNSW
index, united with keyword top-N, each with its raw signals), the second round's (what the first
round's hits lead to), the keyword side's forms and lexicon, and the accesses a recall counts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

import asyncpg
import numpy as np

from app.memory.filters import MemoryFilter
from app.memory.sql import COLUMNS, WALLET, Sql, filter_sql, relation_count

# A recall query's words OR-ed together (plainto_tsquery ANDs them, which long questions rarely
# satisfy); the lexemes are already normalised, so the text is cast, not re-parsed.
OR_TSQUERY = "replace(plainto_tsquery('english', {p})::text, ' & ', ' | ')::tsquery"

# The keyword side ranks its matches by summed IDF (a subquery per row); a big wallet can have
# thousands of matches for a common word, so they are first cut to this many by ts_rank (a
# plain C function). Wallets with fewer matches are ranked by IDF in full.
KEYWORD_PREFILTER = 500

# Over a big wallet (the index path), the keyword side looks for the query's selective words
# only: those in at most this share of the IDF sample (about 2,000 memories of a 100k wallet),
# or the rarest word when none is. A memory holding only common words adds little IDF; reading
# every one (10,733 rows for one query at 1M rows, ts_rank on each) was the keyword side's whole
# cost, p95 48 ms. Those memories still come in by the vector side, and every candidate still
# scores all the query's words.
SELECTIVE_SHARE = 0.02
SELECTIVE_WORDS = f"""selective AS (
    SELECT string_agg(quote_literal(l.word), ' | ')::tsquery AS tsq FROM (
        SELECT lex.word FROM lex WHERE lex.n <= lex.total * {SELECTIVE_SHARE}
        UNION (SELECT lex.word FROM lex ORDER BY lex.n, lex.word LIMIT 1)
    ) l
),"""

# How many of the memories written after a seed in its namespace (by `seq`) recall's second
# round reads when it looks for the seed's continuation: its next turns in the same session
# and within the time gap come among the next few, unless other sessions interleave this much.
CONTINUATION_LOOKAHEAD = 64


# A row `m`'s keyword match (`keyword_match`), from the words of the lexicon `lex` it holds.
#
# "idf", the earlier form: the sum of their IDFs. A memory much longer than the others holds
# many of any question's common words by chance (an assistant's 2,000-word answer holds most
# of a long question's words), so the sum let it outrank the short memory that holds the
# question's one telling word: on BEAM, turning the keyword signal off recovered 47 % of the
# evidence Engram lost to dense-only retrieval (issue 37).
#
# "passage", the default: a memory of p passages (p = its distinct lexemes / PASSAGE_LEXEMES,
# at least 1) has about p times the chance of a one-passage memory to hold a given word, so a
# word it holds tells ln(p) less about it: each word counts max(idf - ln(p), 0). A rare word
# still counts (idf 4-7 against ln(p) <= 2 for 7 passages); a word half the memories hold
# (idf ~0.7) counts nothing in a memory of two passages or more. A memory of one passage or
# less (every LoCoMo turn, a short note) scores exactly as before: no bonus for being short,
# which lost LoCoMo's evidence (longer than its average turn) to short chit-chat.
#
# PASSAGE_LEXEMES is what the default embedder reads of a memory: MiniLM's 256-token window
# holds ~60 distinct lexemes of English text (median over 2,000 BEAM turns of 230-280 tokens;
# 4.3 tokens a lexeme). Up to that length the vector and the keyword side read the same text.
# Measured, not fitted: 30 and BM25's own normalisation (by the wallet's average length) were
# tried and dropped (docs/pages/concepts/recall.md).
PASSAGE_LEXEMES = 60
IDF_SUM = "(SELECT coalesce(sum(lex.idf), 0) FROM lex WHERE m.tsv @@ lex.lq)"
PASSAGE_IDF_SUM = f"""(SELECT coalesce(sum(greatest(
    lex.idf - ln(greatest(length(m.tsv)::float8 / {PASSAGE_LEXEMES}, 1)), 0)), 0)
    FROM lex WHERE m.tsv @@ lex.lq)"""
KEYWORD_FORMS = {"passage": PASSAGE_IDF_SUM, "idf": IDF_SUM}


def _sampled_lexicon(sql: Sql, searched: str, where: str, text: str, corpus_size: int) -> str:
    """The `lex` CTE: each query word with its inverse document frequency among the rows
    searched (`searched` as `m`, those `where` matches; BM25's), counted in one read of up to
    `corpus_size` of those rows: all of a small wallet's, a sample of a big one's (counting a
    common word over every match of a 100k-memory wallet would cost a bitmap of thousands of
    rows per word).

    Each word is counted among the sampled rows that hold any of the query's words (one test of
    each row against their disjunction), not among all of them: a word at a time over the whole
    sample cost ~1.6 ms a word at 2,001 rows, 13 ms of an 8-word query's recall."""
    size = sql.param(corpus_size)
    return f"""sample AS MATERIALIZED (SELECT m.tsv FROM {searched} WHERE {where} LIMIT {size}),
    words AS MATERIALIZED (
        SELECT w AS word, quote_literal(w)::tsquery AS lq
        FROM unnest(tsvector_to_array(to_tsvector('english', {text}))) w
    ),
    holding AS MATERIALIZED (
        SELECT s.tsv FROM sample s
        WHERE s.tsv @@ (SELECT string_agg(quote_literal(word), ' | ')::tsquery FROM words)
    ),
    lex AS (
        SELECT l.word, l.lq, d.n, t.total, ln(1 + (t.total - d.n + 0.5) / (d.n + 0.5)) AS idf
        FROM words l, (SELECT count(*) AS total FROM sample) t,
             LATERAL (SELECT count(*) FILTER (WHERE h.tsv @@ l.lq) AS n FROM holding h) d
    ),"""


def _given_lexicon(sql: Sql, lexicon: Lexicon) -> str:
    """The `lex` CTE from the first round's words and weights: the second round scores its
    rows with the same IDF, without reading the sample again."""
    words, idf = sql.param(list(lexicon)), sql.param(list(lexicon.values()))
    return f"""lex AS (
        SELECT l.word, quote_literal(l.word)::tsquery AS lq, l.idf
        FROM unnest({words}::text[], {idf}::float8[]) AS l(word, idf)
    ),"""


# The distance of a memory `m`'s nearest passage (its text past the model's window, migration
# 0021), NULL for a memory within the window: one primary-key probe per candidate.
PASSAGE_DISTANCE = """(SELECT min(p.embedding <=> {vec}) FROM memory_passages p
    WHERE p.user_id = {wallet} AND p.memory_id = m.id)"""


def _distance(vec: str, passages: bool) -> str:
    """A candidate `m`'s distance from the query: its own vector's, or with `passages` its best
    window's (LEAST skips the NULL of a memory without passages)."""
    own = f"(m.embedding <=> {vec})"
    return f"LEAST({own}, {PASSAGE_DISTANCE.format(vec=vec, wallet=WALLET)})" if passages else own


def _signals(sql: Sql, f: MemoryFilter, vec: str, keyword: str, passages: bool) -> str:
    """The raw signals of a candidate row `m` (joined with `q`), beside its columns."""
    return f"""{COLUMNS},
               1 - {_distance(vec, passages)} AS vector_sim,
               CASE WHEN m.tsv @@ q.tsq THEN {KEYWORD_FORMS[keyword]} ELSE 0 END AS keyword_match,
               {relation_count(sql, f.kept_to)} AS relation_count"""


# A query's words (lexemes) and their inverse document frequencies, as the first round
# counted them.
Lexicon = dict[str, float]


def _scoring_params(
    f: MemoryFilter, embedding: np.ndarray, query: str
) -> tuple[Sql, str, str, str, str]:
    """The filter's WHERE, then the query vector, its text and its OR-ed tsquery as parameters:
    what every statement that scores candidates starts from."""
    sql = filter_sql(f)
    where = sql.sql()
    vec = sql.param(embedding)
    text = sql.param(query)
    return sql, where, vec, text, OR_TSQUERY.format(p=text)


async def recall_candidates(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    embedding: np.ndarray,
    query: str,
    per_side: int,
    exact: bool,
    corpus_size: int,
    keyword: str = "passage",
    passages: bool = True,
) -> tuple[list[asyncpg.Record], int]:
    """Vector top-N (HNSW with iterative scan, or an exact scan) united with keyword top-N.

    `keyword_match` is the sum of the inverse document frequencies of the query's words found
    in a memory, counted over `corpus_size` of the rows searched (all of them, or a sample of a
    big wallet's).

    Returns the candidates with their raw signals and how many the vector side found, so the
    caller can fall back to an exact scan when filters starved the index scan.
    """
    rows = await _candidates(
        conn, f, embedding, query, per_side, exact, corpus_size, None, keyword, passages
    )
    return rows, _vector_hits(rows)


@dataclass(frozen=True)
class ExactCandidates:
    rows: list[asyncpg.Record]
    vector_hits: int
    matching: int  # how many memories the filter matches (all of them were scanned)


async def exact_candidates_within(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    embedding: np.ndarray,
    query: str,
    per_side: int,
    cap: int,
    keyword: str = "passage",
    passages: bool = True,
) -> ExactCandidates | None:
    """`recall_candidates`' exact scan if `f` matches at most `cap` memories, else None (the
    scan stopped at `cap` + 1 rows): the count that picks the plan and the exact scan in one
    statement, one read of the matching rows where a count first read them twice."""
    rows = await _candidates(
        conn, f, embedding, query, per_side, True, cap + 1, cap + 1, keyword, passages
    )
    matching = int(rows[0]["scoped"]) if rows else 0
    if matching > cap:
        return None
    return ExactCandidates(rows, _vector_hits(rows), matching)


def _vector_hits(rows: list[asyncpg.Record]) -> int:
    return int(rows[0]["vector_hits"]) if rows else 0


async def _candidates(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    embedding: np.ndarray,
    query: str,
    per_side: int,
    exact: bool,
    corpus_size: int,
    scope_limit: int | None,
    keyword: str,
    passages: bool,
) -> list[asyncpg.Record]:
    sql, where, vec, text, tsq = _scoring_params(f, embedding, query)
    n = sql.param(per_side)
    scoped = ""
    if exact:
        # One read of the filtered rows, with each one's exact distance, feeds the IDF sample
        # and both sides: as three scans, a filtered big wallet's heap was read three times
        # (19,500 blocks each, 257 ms, in bench/scale.py's slowest query at 1M rows).
        limit = f"LIMIT {sql.param(scope_limit)}" if scope_limit is not None else ""
        # with `passages`, a long memory is as near as its best window (the wallet's passages
        # read once, beside its rows)
        nearest = ""
        own = f"m.embedding <=> {vec}"
        if passages:
            nearest = f"""LEFT JOIN (
                SELECT p.memory_id, min(p.embedding <=> {vec}) AS distance FROM memory_passages p
                WHERE p.user_id = {WALLET} GROUP BY p.memory_id
            ) pd ON pd.memory_id = m.id"""
            own = f"LEAST({own}, pd.distance)"
        scope = f"""scope AS MATERIALIZED (
            SELECT m.id, m.tsv, {own} AS distance FROM memories m {nearest} WHERE {where}
            {limit}
        ),"""
        scoped = ", (SELECT count(*) FROM scope) AS scoped" if limit else ""
        searched, where = "scope m", "true"
        distance = "m.distance"
        matched, selective = "q", ""  # the keyword side looks for every word of the query
    else:  # the HNSW index's order, filtered as it goes (iterative scan)
        scope, searched, distance = "", "memories m", f"m.embedding <=> {vec}"
        matched, selective = "selective", SELECTIVE_WORDS
    lex = _sampled_lexicon(sql, searched, where, text, corpus_size)
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""
        WITH q AS (SELECT {tsq} AS tsq), {scope} {lex} {selective}
        vec AS (SELECT m.id FROM {searched} WHERE {where} ORDER BY {distance} LIMIT {n}),
        kw AS (
            SELECT m.id FROM (
                SELECT m.id, m.tsv FROM {searched}, {matched} t WHERE {where} AND m.tsv @@ t.tsq
                ORDER BY ts_rank(m.tsv, t.tsq, 0) DESC LIMIT {KEYWORD_PREFILTER}
            ) m ORDER BY {KEYWORD_FORMS[keyword]} DESC LIMIT {n}
        ),
        cand AS (SELECT id FROM vec UNION SELECT id FROM kw)
        SELECT {_signals(sql, f, vec, keyword, passages)},
               (SELECT count(*) FROM vec) AS vector_hits,
               (SELECT array_agg(lex.word) FROM lex) AS lex_words,
               (SELECT array_agg(lex.idf) FROM lex) AS lex_idf {scoped}
        FROM cand JOIN memories m ON m.user_id = {WALLET} AND m.id = cand.id, q
        """,
        *sql.params,
    )
    return rows


def lexicon_of(rows: list[asyncpg.Record]) -> Lexicon:
    """The first round's query words and their IDF, as its candidate rows carry them."""
    if not rows or rows[0]["lex_words"] is None:
        return {}
    return dict(zip(rows[0]["lex_words"], map(float, rows[0]["lex_idf"]), strict=True))


async def second_round_candidates(
    conn: asyncpg.Connection,
    f: MemoryFilter,
    seeds: list[UUID],
    embedding: np.ndarray,
    query: str,
    lexicon: Lexicon,
    follow: int,
    max_gap: timedelta,
    keyword: str = "passage",
    passages: bool = True,
) -> list[asyncpg.Record]:
    """What the first round's hits (`seeds`) lead to, each row with its raw signals, the seed
    it came from (`seed_id`) and how far from it (`hops`):

    - continuation: the `follow` memories written right after a seed in its namespace and
      session (by `seq`), each within `max_gap` of the seed (a conversation's next turns: the
      answer to a question, the rest of a story), hops 1..follow;
    - relations: memories a seed is related to, in either direction, hops 1.

    Only memories that `f` matches; a row may come once per seed that leads to it. A seed's
    continuation is looked for among the next CONTINUATION_LOOKAHEAD memories of its namespace:
    unbounded, a seed with no next turn in its session within `max_gap` (most of a big wallet's)
    walked the rest of its namespace, ~56 ms a recall at 100k memories."""
    sql, where, vec, _, tsq = _scoring_params(f, embedding, query)
    ids = sql.param(seeds)
    lex = _given_lexicon(sql, lexicon)
    rows: list[asyncpg.Record] = await conn.fetch(
        f"""
        WITH q AS (SELECT {tsq} AS tsq), {lex}
        seed AS (
            SELECT s.id, s.namespace, s.session_id, s.seq, s.created_at FROM memories s
            WHERE s.user_id = {WALLET} AND s.id = ANY({ids}::uuid[])
        ),
        cand AS (
            SELECT seed.id AS seed_id, nxt.id,
                   row_number() OVER (PARTITION BY seed.id ORDER BY nxt.seq) AS hops
            FROM seed, LATERAL (
                SELECT m.id, m.seq FROM (
                    SELECT m.* FROM memories m
                    WHERE m.user_id = {WALLET} AND m.namespace = seed.namespace
                      AND m.seq > seed.seq AND m.deleted_at IS NULL
                    ORDER BY m.seq LIMIT {CONTINUATION_LOOKAHEAD}
                ) m
                WHERE {where} AND m.session_id IS NOT DISTINCT FROM seed.session_id
                  AND m.created_at <= seed.created_at + {sql.param(max_gap)}
                ORDER BY m.seq LIMIT {sql.param(follow)}
            ) nxt
            UNION
            SELECT seed.id, CASE WHEN r.source_id = seed.id THEN r.target_id ELSE r.source_id END,
                   1
            FROM seed JOIN memory_relations r ON r.user_id = {WALLET}
                AND (r.source_id = seed.id OR r.target_id = seed.id)
        )
        SELECT {_signals(sql, f, vec, keyword, passages)}, cand.seed_id, cand.hops
        -- one primary-key lookup per candidate (OFFSET 0 keeps the planner from flattening it
        -- into a join that scanned the whole wallet: 2 ms at 680 memories)
        FROM cand CROSS JOIN LATERAL (
            SELECT m.* FROM memories m
            WHERE m.user_id = {WALLET} AND m.id = cand.id AND {where} OFFSET 0
        ) m, q
        """,
        *sql.params,
    )
    return rows


async def record_access_each_time(conn: asyncpg.Connection, wallet: str, ids: list[UUID]) -> None:
    """MemoClaw's own accounting (ENGRAM_RECALL_COUNTS_ACCESS=1): every recalled memory counts."""
    await conn.execute(
        """UPDATE memories SET access_count = access_count + 1, accessed_at = now()
           WHERE id = ANY($1::uuid[]) AND user_id = $2""",
        ids, wallet,
    )  # fmt: skip
