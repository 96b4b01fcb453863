"""Which fact model serves extraction: built here, beside nothing it depends on, so the protocol
(facts.py) and its two implementations (heuristics.py offline, llm.py over HTTP) import one way.
"""

from __future__ import annotations

from app.ai.facts import FactModel
from app.ai.heuristics import HeuristicFactModel
from app.ai.llm import DEFAULT_LLM_MODEL, OpenAIFactModel
from app.config import LLMSettings


def build_fact_model(settings: LLMSettings) -> FactModel:
    """The offline heuristics unless an OpenAI key or an OpenAI-compatible base_url is set
    (env OPENAI_API_KEY, ENGRAM_LLM_BASE_URL, ENGRAM_LLM_MODEL)."""
    if not settings.openai_api_key and not settings.base_url:
        return HeuristicFactModel()
    return OpenAIFactModel(
        api_key=settings.openai_api_key or None,
        base_url=settings.base_url or None,
        model=settings.model or DEFAULT_LLM_MODEL,
    )
