"""Which fact model serves extraction: built here, beside nothing it depends on, so the protocol
(facts.py) and its two implementations (heuristics.py offline, llm.py over HTTP) import one way.
"""

from __future__ import annotations

from app.ai.facts import FactModel
from app.ai.heuristics import HeuristicFactModel
from app.ai.llm import DEFAULT_LLM_MODEL, OpenAIFactModel


def build_fact_model(
    openai_api_key: str | None, base_url: str | None, model: str | None
) -> FactModel:
    """The offline heuristics unless an OpenAI key or an OpenAI-compatible base_url is set
    (env OPENAI_API_KEY, ENGRAM_LLM_BASE_URL, ENGRAM_LLM_MODEL)."""
    if not openai_api_key and not base_url:
        return HeuristicFactModel()
    return OpenAIFactModel(
        api_key=openai_api_key or None,
        base_url=base_url or None,
        model=model or DEFAULT_LLM_MODEL,
    )
