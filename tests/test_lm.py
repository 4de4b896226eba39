"""CachedLM (cadedit.backends.model), the decode loop's language model: it knows the ids its KV cache
holds, crops them with the cache, starts over after a failed forward, and keeps the cache of the
prefix a new prompt shares with the last decode -- so a second decode feeds only the rest and writes
exactly the ids a fresh cache gives (fp64 tiny model: batched and stepwise logits agree)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import cadedit.decode.pipeline as pipeline
from cadedit.decode.loop import DecodeStats, decode, sampler_for
from cadedit.text.document import Document
from cadedit.errors import BudgetError, ModelError
from cadedit.backends.model import LoadedModel, CachedLM, language_model
from cadedit.options import EditOptions, Mode
from tests.test_verify import CORPUS, fenced_run, tiny  # noqa: F401 - tiny is a fixture
from tests.tinymodel import make_model


@pytest.fixture(scope="module")
def model():
    return make_model(0)


def fresh(model) -> CachedLM:
    return CachedLM(model, model.new_cache())


def test_feed_and_crop_keep_the_ids_of_the_cache(model):
    lm = fresh(model)
    assert lm.feed([1, 2, 3, 4], keep=2).shape == (2, model.config.vocab_size)
    lm.feed([5])
    assert lm.ids == [1, 2, 3, 4, 5] and lm.cache.length == 5
    lm.crop(2)
    assert lm.ids == [1, 2, 3] and lm.cache.length == 3
    lm.crop(0)
    assert lm.ids == [1, 2, 3]


def test_reuse_keeps_the_common_prefix_and_leaves_one_id_to_feed(model):
    lm = fresh(model)
    lm.feed([1, 2, 3, 4, 5, 6])
    assert lm.reuse([1, 2, 3, 9, 9]) == 3 and lm.ids == [1, 2, 3] and lm.cache.length == 3
    lm.feed([9, 9])
    assert lm.reuse([1, 2, 3, 9, 9]) == 4  # the same prompt: its last id is fed again for the logits
    assert lm.ids == [1, 2, 3, 9] and lm.cache.length == 4
    assert lm.reuse([7, 1, 2]) == 0 and lm.ids == [] and lm.cache.length == 0
    lm.feed([1, 2])
    assert lm.reuse([1]) == 0 and lm.ids == []


def test_a_reused_prefix_gives_the_logits_of_a_fresh_cache(model):
    g = torch.Generator().manual_seed(5)
    first = torch.randint(0, 700, (40,), generator=g).tolist()
    second = first[:25] + torch.randint(0, 700, (12,), generator=g).tolist()
    lm = fresh(model)
    lm.feed(first)
    kept = lm.reuse(second)
    assert kept == 25
    reused = lm.feed(second[kept:], keep=3)
    np.testing.assert_allclose(np.asarray(reused), np.asarray(fresh(model).feed(second, keep=3)), rtol=1e-4, atol=1e-5)


def test_a_failed_forward_starts_over_with_an_empty_cache(model):
    lm = fresh(model)
    lm.feed([1, 2, 3])
    with pytest.raises(ModelError, match="token id 10000 is outside the model's vocabulary of"):
        lm.feed([10_000])  # past the embedding table: refused before the forward, the cache as it was
    assert lm.ids == [1, 2, 3] and lm.cache.length == 3

    def fails(*args):
        raise RuntimeError("a forward cut short")

    lm.model = type(
        "Failing",
        (),
        {
            "config": model.config,
            "device": model.device,
            "forward_logits": fails,
            "new_cache": lambda self: model.new_cache(),
        },
    )()
    with pytest.raises(RuntimeError):
        lm.feed([4])
    lm.model = model
    assert lm.ids == [] and lm.cache.length == 0
    lm.feed([1, 2])
    assert lm.ids == [1, 2]
    lm.reset()
    assert lm.ids == [] and lm.cache.length == 0


def test_the_loaded_model_has_one_lm(tiny):
    assert language_model(tiny) is language_model(tiny)
    other = LoadedModel(make_model(1), tiny.tokenizer, "tiny", "cpu", torch.float32, 1, 4096, 0.0)
    assert language_model(other) is not language_model(tiny)


# -- a second decode with a shared prompt prefix -----------------------------------------------


def run_reusing(loaded, prepared: pipeline.Prepared):
    """What pipeline.run_decode does (the loaded model's LM, reuse, the mode's parts), keeping the
    ids of an answer the budget cut short."""
    lm = language_model(loaded)
    reused = lm.reuse(prepared.prompt_ids)
    cursor, span_ids, drafter = pipeline.mode_parts(loaded, None, prepared, True)
    seen = [DecodeStats(tokens_reused=reused)]
    try:
        decoded = decode(
            lm,
            cursor,
            prepared.prompt_ids,
            span_ids,
            sampler_for(),
            prepared.budget,
            lambda stats, step: seen.append(stats),
            drafter,
            reused,
        )
    except BudgetError:
        return tuple(cursor.ids), seen[-1], lm
    return decoded.ids, decoded.stats, lm


@pytest.mark.parametrize("mode", [Mode.REWRITE, Mode.VERIFY])
def test_a_second_decode_feeds_only_what_its_prompt_does_not_share(tiny, mode):
    rng = random.Random(4)
    head = rng.sample(CORPUS, 6)
    first = Document.from_text("".join(head + rng.sample(CORPUS, 3)), "x.py")
    second = Document.from_text("".join(head + rng.sample(CORPUS, 3)), "x.py")
    options = EditOptions(mode=mode, max_new_tokens=60)
    p1, p2 = (pipeline.prepare(tiny, d, "Fix it.", options) for d in (first, second))
    shared = next(k for k in range(len(p1.prompt_ids)) if p1.prompt_ids[k] != p2.prompt_ids[k])
    assert shared > 50
    language_model(tiny).reset()
    run_reusing(tiny, p1)
    ids, stats, lm = run_reusing(tiny, p2)
    assert stats.tokens_reused == shared and stats.tokens_prompt == len(p2.prompt_ids) - shared
    assert lm.ids[: len(p2.prompt_ids)] == list(p2.prompt_ids) and lm.cache.length == len(lm.ids)
    fresh_run = fenced_run(tiny, p2, mode)  # a fresh cache: the whole prompt fed
    assert fresh_run.stats.tokens_prompt == len(p2.prompt_ids)
    assert ids == fresh_run.ids and len(ids) > 10


def test_run_decode_reports_the_reused_prompt(tiny):
    document = Document.from_text("".join(CORPUS[:5]), "x.py")
    prepared = pipeline.prepare(tiny, document, "Fix it.", EditOptions(mode=Mode.VERIFY, max_new_tokens=20))
    seen = []
    for _ in range(2):
        try:
            pipeline.run_decode(tiny, document, prepared, sampler_for(), on_step=lambda s, step: seen.append(s))
        except BudgetError:
            pass
        seen.append(None)
    cut = seen.index(None)
    first, second = seen[0], seen[cut + 1]
    assert second.tokens_reused == len(prepared.prompt_ids) - 1 and second.tokens_prompt == 1
    assert first.tokens_prompt + first.tokens_reused == len(prepared.prompt_ids)
