"""A model2vec static model (ENGRAM_EMBED_STATIC_DIR, or ENGRAM_EMBED_MODEL=potion-base-8M from
the model cache): a text's vector is the mean of its tokens' rows, as model2vec computes it,
padded with zeros to the database's dimension without changing any cosine. The model here is
one the test makes in potion-base-8M's format (a safetensors table over the MiniLM tokenizer's
vocabulary), not the 30 MB one `engram prepare-model --static` extracts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from app.ai.embedders import build_embedder
from app.ai.static import StaticEmbedder, read_safetensors
from app.config import EmbedderSettings
from tests.support.static_model import NATIVE, make_static_model

TEXTS = ["I adopted a dog last spring", "my puppy chews everything", "the stock market fell"]


def plain_tokenizer(directory: Path) -> Tokenizer:
    """The model's tokenizer without the padding and truncation MiniLM's file asks for."""
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def by_hand(directory: Path, text: str) -> np.ndarray:
    """model2vec's encode written out: no special tokens, [UNK] dropped, rows averaged, L2."""
    tensors = read_safetensors(directory / "model.safetensors")
    table = tensors["embeddings"]
    if "weights" in tensors:
        table = table * tensors["weights"][:, None]
    tokenizer = plain_tokenizer(directory)
    unk = tokenizer.token_to_id("[UNK]")
    ids = [i for i in tokenizer.encode(text, add_special_tokens=False).ids if i != unk]
    mean = table[ids].mean(axis=0)
    return np.asarray(mean / np.linalg.norm(mean), dtype=np.float32)


@pytest.mark.parametrize("weights", [False, True])
async def test_a_text_is_the_mean_of_its_token_rows(tmp_path: Path, weights: bool) -> None:
    directory = make_static_model(tmp_path / "potion-like", weights=weights)
    embedder = StaticEmbedder(directory)
    assert (embedder.model_name, embedder.dims) == ("potion-like", NATIVE)
    result = await embedder.embed([*TEXTS, "", "☃☃"])  # empty, and only unknown tokens
    for text, vector in zip(TEXTS, result.vectors, strict=False):
        assert np.allclose(vector, by_hand(directory, text), atol=1e-6)
    assert not result.vectors[3].any() and not result.vectors[4].any()  # zero, not NaN
    tokenizer = plain_tokenizer(directory)
    assert result.tokens == sum(len(tokenizer.encode(t, add_special_tokens=False)) for t in TEXTS)


async def test_a_batch_embeds_each_text_as_alone(tmp_path: Path) -> None:
    """A batch past the inline size goes to a thread; no vector depends on its neighbours."""
    embedder = StaticEmbedder(make_static_model(tmp_path / "m"))
    batch = (await embedder.embed(TEXTS * 5)).vectors
    for k, text in enumerate(TEXTS * 5):
        assert np.array_equal(batch[k], (await embedder.embed([text])).vectors[0])


async def test_padding_to_the_database_dimension_changes_no_cosine(tmp_path: Path) -> None:
    directory = make_static_model(tmp_path / "m")
    native = (await StaticEmbedder(directory).embed(TEXTS)).vectors
    padded = (await StaticEmbedder(directory, dims=384).embed(TEXTS)).vectors
    assert all(v.shape == (384,) and not v[NATIVE:].any() for v in padded)
    for i in range(3):
        assert np.allclose(padded[i][:NATIVE], native[i])
        for j in range(3):
            assert abs(float(padded[i] @ padded[j]) - float(native[i] @ native[j])) < 1e-6


def test_a_dimension_below_the_model_s_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="padded up, never cut"):
        StaticEmbedder(make_static_model(tmp_path / "m"), dims=8)


def test_selected_by_directory_or_by_name_from_the_model_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = make_static_model(tmp_path / "mine")
    by_dir = build_embedder(EmbedderSettings(static_dir=directory))
    assert (by_dir.model_name, by_dir.dims) == ("mine", 384)  # padded to MiniLM's by default
    native = build_embedder(EmbedderSettings(static_dir=directory, dims=NATIVE, model="m2v"))
    assert (native.model_name, native.dims) == ("m2v", NATIVE)

    monkeypatch.setenv("ENGRAM_MODEL_CACHE", str(tmp_path / "cache"))
    settings = EmbedderSettings(model="potion-base-8M")
    assert settings.is_static and settings.expected_dims == 384
    with pytest.raises(FileNotFoundError, match="engram prepare-model --static"):
        build_embedder(settings)
    make_static_model(tmp_path / "cache" / "potion-base-8M")
    cached = build_embedder(settings)
    assert (cached.model_name, cached.dims) == ("potion-base-8M", 384)
    # an OpenAI key or endpoint wins, as over the local MiniLM
    assert not EmbedderSettings(model="potion-base-8M", openai_api_key="sk").is_static
