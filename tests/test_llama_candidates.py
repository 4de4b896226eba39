"""Candidates side by side on the llama.cpp backend: rows are sequence ids of one context (the prompt's
cells shared through llama_memory_seq_cp), fed together in one llama_batch. Rows equal separate feeds
within llama.cpp's own noise (tests/test_llama.py: 1e-3), each row writes what a separate decode with
its sampler writes (on the scaled model, whose argmaxes stand far above that noise), and `cadedit fix
--candidates` runs on the backend through the console script.

Without llama-cpp-python these tests skip, unless CADEDIT_REQUIRE_LLAMA=1 (CI sets it).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace

import pytest
import numpy as np

if os.environ.get("CADEDIT_REQUIRE_LLAMA") != "1":
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'cadedit[llama]')")

from cadedit.backends.llama import llamacpp
from cadedit.text.document import Document
from cadedit.backends.model import CachedLM, new_cache
from cadedit.options import Mode, Sampling
from tests.test_candidates import branches_against_forced_decodes, rows_for, run_rows
from tests.test_llama import (
    SAME,
    TOK,
    cli,
    colors,  # noqa: F401
    editing_gguf,  # noqa: F401
    llama_scaled,  # noqa: F401
    llama_tiny,  # noqa: F401
    scaled_gguf,  # noqa: F401
    tiny_gguf,  # noqa: F401
)
from tests.test_verify import CORPUS, prepared_for


def test_rows_are_sequences_fed_together_and_equal_separate_feeds(llama_tiny):
    prompt = TOK.encode("def add(a, b):\n    return a + b\n" * 3)
    feeds = [TOK.encode("x = 1\n"), TOK.encode("y"), TOK.encode("class Z:\n    pass\n")]
    keeps = [2, 1, 3]
    lm = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    lm.feed(prompt)
    lm.fork(3)
    assert [row.seq for row, _ in lm.rows] == [1, 2]
    batched = [np.array(r) for r in lm.feed_rows([0, 1, 2], feeds, keeps)]  # copies: later forwards reuse the buffer
    lm.crop_row(2, 2)
    after_crop = np.array(lm.feed_rows([2], [TOK.encode("z")], [1])[0])
    lm.fork(1)
    assert not lm.rows and not llama_tiny.model.rows and lm.ids == prompt + feeds[0]
    for feed, keep, got in zip(feeds, keeps, batched):
        alone = CachedLM(llama_tiny.model, new_cache(llama_tiny))
        alone.feed(prompt)
        assert got.shape == (keep, 768)
        assert np.allclose(got, alone.feed(feed, keep), atol=SAME), float(np.abs(got - alone.feed(feed, keep)).max())
    alone = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    alone.feed(prompt + feeds[2][:-2])
    assert np.allclose(after_crop, alone.feed(TOK.encode("z")), atol=SAME)


def test_many_rows_with_long_feeds_split_into_calls_and_keep_their_rows(llama_tiny):
    prompt = TOK.encode("import os\n" * 4)
    feeds = [TOK.encode("for i in range(10):\n    print(i)\n" * 6)[: 60 + 7 * k] for k in range(4)]
    keeps = [len(f) for f in feeds]  # more kept rows than one call returns
    assert sum(keeps) > llamacpp.ROW_OUTPUTS
    lm = CachedLM(llama_tiny.model, new_cache(llama_tiny))
    lm.feed(prompt)
    lm.fork(4)
    batched = [np.array(r) for r in lm.feed_rows([0, 1, 2, 3], feeds, keeps)]
    lm.fork(1)
    for feed, got in zip(feeds, batched):
        alone = CachedLM(llama_tiny.model, new_cache(llama_tiny))
        alone.feed(prompt)
        assert np.allclose(got, alone.feed(feed, len(feed)), atol=SAME)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("mode", [Mode.VERIFY, Mode.LOOKUP])
def test_each_row_writes_what_a_separate_decode_with_its_picker_writes(llama_scaled, seed, mode):
    rng = random.Random(seed)
    document = Document.from_text("".join(rng.sample(CORPUS, 8)), "x.py")
    prepared = replace(prepared_for(llama_scaled, document, 90), mode=mode)
    samplings = (Sampling(), Sampling(0.8, 1.0, 11), Sampling(1.0, 1.0, 13))
    batched = run_rows(
        CachedLM(llama_scaled.model, new_cache(llama_scaled)),
        rows_for(llama_scaled, prepared, samplings, mode),
        prepared,
    )
    for row, sampling in zip(batched, samplings):
        alone = run_rows(
            CachedLM(llama_scaled.model, new_cache(llama_scaled)),
            rows_for(llama_scaled, prepared, [sampling], mode),
            prepared,
        )[0]
        assert row.ids == alone.ids
        assert row.logprob == pytest.approx(alone.logprob, rel=1e-2, abs=1e-2)
    assert len({tuple(row.ids) for row in batched}) > 1


def test_fix_with_candidates_on_the_llama_backend(colors, editing_gguf):  # noqa: F811
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(editing_gguf),
        "--backend",
        "llama",
        "--candidates",
        "3",
        "--candidates-by",
        "sample",
        "--threads",
        "1",
        "--json",
        "-q",
        "--write",
        cwd=colors,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["backend"] == "llama" and data["passed"] and data["answer_candidate"] is not None
    assert sorted(t["candidate"] for t in data["tries"]) == [1, 2, 3]
    assert all(t["logprob"] is not None for t in data["tries"])
    assert (colors / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_fix_branches_from_a_failing_first_candidate_on_the_llama_backend(colors, editing_gguf):  # noqa: F811
    """A test that fails once: candidate 1 (the bigram model's teal -> green) fails it, so its branches
    are decoded on llama.cpp sequences; off the text it knows, this model never closes the fence, so
    each branch is stopped past candidate 1's forwards, reported, and nothing is written (exit 3)."""
    once = "[ -e seen ] || { touch seen; exit 1; }"
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(editing_gguf),
        "--backend",
        "llama",
        "--candidates",
        "3",
        "--test",
        once,
        "--tries",
        "1",
        "--threads",
        "1",
        "--json",
        "--write",
        cwd=colors,
    )
    assert done.returncode == 3, done.stderr
    data = json.loads(done.stdout)
    first, *branches = data["tries"]
    assert (
        first["candidate"] == 1 and first["changed"] and [c["passed"] for c in first["checks"]] == [True, True, False]
    )
    assert sorted(t["candidate"] for t in branches) == [2, 3]
    assert all(t["error"].startswith("stopped after") and t["logprob"] < first["logprob"] for t in branches)
    assert "candidate 3 of 3: failed: stopped after" in done.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


def test_more_candidates_than_the_context_holds_is_a_usage_error(colors, editing_gguf):  # noqa: F811
    done = cli(
        "fix",
        "colors.txt",
        "Rename teal to green.",
        "--model",
        str(editing_gguf),
        "--backend",
        "llama",
        "--candidates",
        str(llamacpp.MAX_ROWS + 1),
        cwd=colors,
    )
    assert done.returncode == 2 and "--candidates" in done.stderr
    assert (colors / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


@pytest.mark.parametrize("seed", range(2))
def test_a_branch_writes_what_a_fresh_decode_forced_to_its_alternative_writes(llama_scaled, seed):
    """Branches are sequence ids forked from the decode's own sequence and cropped to their start."""
    document = Document.from_text("".join(random.Random(seed).sample(CORPUS, 8)), "x.py")
    prepared = replace(prepared_for(llama_scaled, document, 90), mode=Mode.VERIFY)
    rows = branches_against_forced_decodes(llama_scaled, prepared, rel=1e-2)
    assert len({tuple(row.ids) for row in rows}) == len(rows)
