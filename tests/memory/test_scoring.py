"""The recall score's pieces, each against the contract's published formula."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from app.memory import scoring

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def score(**overrides):
    args = dict(
        vector_sim=0.8, keyword_match=0.4, importance=0.5, memory_type="general", pinned=False,
        created_at=NOW, accessed_at=NOW, access_count=0, relation_count=0, now=NOW,
    )  # fmt: skip
    args.update(overrides)
    return scoring.score_memory(**args)


def test_fresh_memory_score_by_hand() -> None:
    s = score()
    hybrid = 0.8 * 0.55 + 0.4 * 0.25 + 1.0 * 0.20
    relevance = (0.8 * 0.55 + 0.4 * 0.25) / 0.8
    ctx = 0.5 * (0.5 + 0.5 * relevance)
    assert s.recency == 1.0 and s.type_decay == 1.0 and s.access_boost == 1.0
    assert s.context_importance == pytest.approx(ctx)
    assert s.score == pytest.approx(hybrid * ctx)


def test_recency_is_exp_minus_age_over_30_days() -> None:
    s = score(created_at=NOW - timedelta(days=30), accessed_at=NOW)
    assert s.recency == pytest.approx(math.exp(-1))


@pytest.mark.parametrize(
    ("memory_type", "half_life"),
    [("correction", 180), ("preference", 180), ("decision", 90), ("project", 30),
     ("observation", 14), ("general", 60)],
)  # fmt: skip
def test_type_decay_halves_at_the_types_half_life(memory_type: str, half_life: int) -> None:
    s = score(memory_type=memory_type, accessed_at=NOW - timedelta(days=half_life))
    assert s.type_decay == pytest.approx(0.5)


def test_pinned_memories_do_not_decay() -> None:
    assert score(pinned=True, accessed_at=NOW - timedelta(days=400)).type_decay == 1.0


def test_decay_counts_from_last_access_not_creation() -> None:
    s = score(memory_type="observation", created_at=NOW - timedelta(days=100), accessed_at=NOW)
    assert s.type_decay == 1.0


def test_access_boost_caps_at_two() -> None:
    assert score(access_count=3).access_boost == pytest.approx(1.3)
    assert score(access_count=50).access_boost == 2.0


def test_relations_slow_decay_and_lift_importance() -> None:
    lone = score(memory_type="project", accessed_at=NOW - timedelta(days=30))
    linked = score(memory_type="project", accessed_at=NOW - timedelta(days=30), relation_count=10)
    assert linked.type_decay == pytest.approx(0.5 ** (30 / 60))  # half-life doubled
    assert linked.type_decay > lone.type_decay
    assert linked.effective_importance == pytest.approx(0.7)


def test_importance_counts_more_when_the_memory_is_relevant() -> None:
    relevant = score(importance=1.0, vector_sim=1.0, keyword_match=1.0)
    off_topic = score(importance=1.0, vector_sim=0.0, keyword_match=0.0)
    assert relevant.context_importance == 1.0
    assert off_topic.context_importance == 0.5


def test_zero_importance_keeps_a_floor() -> None:
    assert score(importance=0.0).context_importance == scoring.CONTEXT_IMPORTANCE_FLOOR


def test_access_boost_can_be_switched_off() -> None:
    """ENGRAM_RECALL_ACCESS_BOOST=0: an often-recalled memory gains nothing from it."""
    assert score(access_count=50, use_access_boost=False).access_boost == 1.0
    assert score(access_count=50, use_access_boost=False).score == pytest.approx(score().score)


def test_the_wire_rounds_every_float_signal_to_six_decimals_and_keeps_the_rest() -> None:
    s = score(vector_sim=0.123456789, keyword_match=0.987654321, relation_count=3)
    wire = s.rounded()
    assert wire.vector == 0.123457 and wire.keyword == 0.987654
    assert wire.score == round(s.score, 6) and wire.relation_count == 3
    assert wire.rerank is msgspec.UNSET  # absent unless the rerank stage ordered the result
    reranked = scoring.with_rerank(s, 0.1234564999).rounded()
    assert reranked.rerank == 0.123456
