"""Counting tokens with a real tokenizer, offline: the local embedder's WordPiece tokenizer.

OpenAI's own BPE (tiktoken) downloads its vocabulary at run time, which this product must not
need; WordPiece counts run within a few percent of cl100k on English prose, and a context block
is sized with a margin anyway.
"""

from __future__ import annotations

import functools
import importlib.resources

from tokenizers import Tokenizer

from app.ai.embedders import _tokenizer_resource


@functools.cache
def _tokenizer() -> Tokenizer:
    with importlib.resources.as_file(_tokenizer_resource()) as path:
        tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(text: str) -> int:
    """Tokens in `text`, without the [CLS]/[SEP] a model input would add."""
    if not text:
        return 0
    return len(_tokenizer().encode(text, add_special_tokens=False).ids)
