"""Candidates decoded side by side (`--candidates K`) on the torch backend: the rows of one batched
decode write exactly what separate decodes with the same samplers write (greedy and seeded samples),
the batched KV cache equals separate feeds, one candidate is today's decode, and `cadedit fix
--candidates 3 --test ...` checks the candidates in the order of their log-probability and takes the
first that passes (scripted candidates through the real batched loop, real model, real checks)."""

from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest
import torch

import cadedit.decode.pipeline as pipeline
from cadedit.bench import candidates as bench_candidates
from cadedit.decode.loop import Row, decode_rows, sampler_for, script_sampler
from cadedit.text.document import Document
from cadedit.errors import BudgetError
from cadedit.backends.model import CachedLM, LoadedModel, encode, new_cache, token_bytes
from cadedit.options import EditOptions, Mode, Sampling
from cadedit.decode.pipeline import branch_key, edit_candidates, edit_file
from tests.scripting import given, inject_branches, inject_picks, invoke, spelling
from tests.test_rewrite import BEFORE as COLORS, editing_model
from tests.test_tries_cli import BEFORE, GOOD, GREP_TEST, WRONG, load_once, _models, work  # noqa: F401 - fixtures
from tests.test_verify import CORPUS, TOK, prepared_for
from tests.tinymodel import make_model, scaled_model

SAMPLINGS = (Sampling(), Sampling(0.8, 1.0, 11), Sampling(0.8, 0.9, 12), Sampling(1.0, 1.0, 13))


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    """fp64 (batched and separate forwards agree far below any argmax margin), scaled so the random
    model writes varied text (tests/test_verify.py)."""
    return LoadedModel(scaled_model(torch.float64), TOK, "tiny", "cpu", torch.float64, 1, 4096, 0.0)


def rows_for(loaded: LoadedModel, prepared, samplings, mode: Mode) -> list[Row]:
    rows = []
    for sampling in samplings:
        cursor, _, drafter = pipeline.mode_parts(loaded, None, prepared, True)
        rows.append(Row(cursor, sampler_for(sampling), drafter, score=True))
    return rows


def run_rows(lm, rows, prepared) -> list[Row]:
    try:
        for _ in decode_rows(lm, rows, prepared.prompt_ids, None, prepared.budget):
            pass
    except BudgetError:
        assert len(rows) == 1  # alone, a row out of budget raises; among others it stops
    return rows


@pytest.mark.parametrize("mode", [Mode.VERIFY, Mode.REWRITE, Mode.LOOKUP])
@pytest.mark.parametrize("seed", range(2))
def test_each_row_writes_what_a_separate_decode_with_its_picker_writes(tiny, mode, seed):
    from dataclasses import replace

    rng = random.Random(seed)
    document = Document.from_text("".join(rng.sample(CORPUS, 8)), "x.py")
    prepared = replace(prepared_for(tiny, document, 90), mode=mode)
    lm = CachedLM(tiny.model, new_cache(tiny))
    batched = run_rows(lm, rows_for(tiny, prepared, SAMPLINGS, mode), prepared)
    assert not lm.rows and lm.ids[: len(prepared.prompt_ids)] == list(prepared.prompt_ids)  # row 0 stays the cache
    for row, sampling in zip(batched, SAMPLINGS):
        alone = run_rows(CachedLM(tiny.model, new_cache(tiny)), rows_for(tiny, prepared, [sampling], mode), prepared)[0]
        assert row.ids == alone.ids and row.cursor.text() == alone.cursor.text()
        assert (row.error is None) == alone.cursor.is_done()
        assert row.logprob == pytest.approx(alone.logprob, rel=1e-9, abs=1e-9)
        assert row.logprob < 0
    assert len({tuple(row.ids) for row in batched}) > 1  # the sampled rows are other candidates


def test_rows_of_different_lengths_equal_separate_feeds():
    model = make_model()
    batched, alone = CachedLM(model, model.new_cache()), CachedLM(model, model.new_cache())
    prompt = list(range(5, 60))
    batched.feed(prompt)
    batched.fork(3)
    feeds, keeps = [[7, 8, 9], [10], [11, 12, 13, 14, 15]], [2, 1, 3]
    out = batched.feed_rows([0, 1, 2], feeds, keeps)
    for k in range(3):
        alone.reset()
        alone.feed(prompt)
        assert out[k].shape == (keeps[k], model.config.vocab_size)
        np.testing.assert_allclose(np.asarray(out[k]), np.asarray(alone.feed(feeds[k], keeps[k])), atol=1e-5, rtol=1e-5)
    batched.crop_row(2, 2)  # row 2 forgets 14, 15; rows 0 and 1 keep theirs
    out = batched.feed_rows([2, 0], [[99], [98, 97]], [1, 2])
    alone.reset()
    alone.feed(prompt + [11, 12, 13])
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(alone.feed([99])), atol=1e-5, rtol=1e-5)
    alone.reset()
    alone.feed(prompt + [7, 8, 9])
    np.testing.assert_allclose(np.asarray(out[1]), np.asarray(alone.feed([98, 97], 2)), atol=1e-5, rtol=1e-5)
    batched.fork(1)
    assert not batched.rows and batched.ids == prompt + [7, 8, 9, 98, 97]


def test_one_candidate_is_the_plain_edit_and_rows_share_one_prompt_prefill(monkeypatch):
    monkeypatch.setenv("CADEDIT_PREFIX_CACHE", "0")  # the prompt from memory or fed, not read back from disk
    document = Document.from_text(COLORS, "colors.txt")
    loaded = editing_model(document)
    options = EditOptions(mode=Mode.VERIFY)
    plain = edit_file(document, "Rename teal to green.", options, loaded=loaded)
    one = edit_candidates(document, "Rename teal to green.", options, [given(sampler_for())], loaded=loaded)
    assert [c.result.new_text for c in one] == [plain.new_text] and one[0].error is None
    pipeline.language_model(loaded).reset()
    three = edit_candidates(
        document, "Rename teal to green.", options, [given(sampler_for(s)) for s in SAMPLINGS[:3]], loaded=loaded
    )
    assert three[0].result.new_text == plain.new_text == "red:\ngreen;\nblue)\n"
    prompt = pipeline.prepare(loaded, document, "Rename teal to green.", options).prompt_ids
    for c in three:  # the prompt was fed once: every row counts the same prefill forward
        if c.result is not None:
            assert c.result.stats.tokens_prompt == len(prompt)
        else:  # a sample that ran on far past candidate 1's forwards was stopped
            assert c.error.message.startswith("stopped after") and "far past candidate 1's" in c.error.message
    assert all(c.logprob < 0 for c in three)


# -- through the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def scripted_rows(monkeypatch):
    """scripted_rows(*rows, then=rows[-1]): the batched try's candidate k spells rows[k - 1] through the
    real batched loop, a later (single) try spells `then`; given as tries.edit_verified's picks
    (`cadedit fix`) and bench candidates' measure_case picks. Records the rows of each batched decode."""
    calls: list[int] = []

    def script(*rows: str, then: str | None = None):
        def spell(answer: str, first: bool = False):
            def make_sampler(loaded, document, prepared):
                if first:  # once per batched decode
                    calls.append(len(rows))
                return script_sampler(answer + prepared.fence + "\n", token_bytes(loaded))

            return make_sampler

        batch = [spell(answer, first=k == 0) for k, answer in enumerate(rows)]

        def picks(k: int):  # 0: the where-step, not scripted here; one row: try 1 is a single candidate
            return (batch if len(rows) > 1 else spell(rows[0])) if k == 1 else spell(then or rows[-1]) if k else None

        inject_picks(monkeypatch, picks)
        monkeypatch.setattr(
            bench_candidates, "measure_case", functools.partial(bench_candidates.measure_case, factories=batch)
        )
        return calls

    return script


def fix(tiny_dir, *args: str):
    return invoke(["fix", "a.py", "Fix the bug.", "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1", *args])


def test_with_a_test_and_no_candidates_asked_a_failing_try_makes_four_and_without_a_test_one(
    tiny_dir, work, scripted_rows, monkeypatch
):
    """The measured default: where --test decides, a try makes up to 4 candidates, the others branching
    from candidate 1 once it failed (here it changes nothing; the branches spell "+" for its "-"); without
    a test, a single candidate (the checks alone cannot tell the right one)."""
    calls = scripted_rows(BEFORE.decode(), GOOD, WRONG, BEFORE.decode())
    inject_branches(monkeypatch, b" -", b" +")
    tested = fix(tiny_dir, "--test", GREP_TEST, "--json")
    assert tested.exit_code == 0, tested.output
    data = json.loads(tested.stdout)
    assert calls == [4] and data["answer_try"] == 1 and data["answer_candidate"] in (2, 3, 4)
    assert sorted(t["candidate"] for t in data["tries"]) == [1, 2, 3, 4]
    assert data["tries"][0]["candidate"] == 1 and [c["name"] for c in data["tries"][0]["checks"]] == [
        "syntax",
        "names",
        "kept",
        "body",
        "public",
        "change",
    ]
    assert ", candidate 1 of 4: failed: change" in tested.stderr and " of 4: passed" in tested.stderr
    scripted_rows(GOOD)
    alone = fix(tiny_dir, "--json")
    assert alone.exit_code == 0, alone.output
    assert [t["candidate"] for t in json.loads(alone.stdout)["tries"]] == [0]


def test_later_tries_make_eight_and_a_copy_of_an_earlier_try_is_not_tested_again(
    tiny_dir, work, scripted_rows, monkeypatch, tmp_path
):
    """The default after try 1 where a test decides: 8 candidates a try (settings.LATER_TESTED_CANDIDATES).
    A candidate that spells what an earlier try already checked carries that one's checks: the test
    runs once for it in all (here try 2 repeats try 1's answers; nothing passes, nothing is written)."""
    calls = scripted_rows(
        "def add(a, b):\n    return a * b\n\n\nprint(add(1, 2))\n",
        BEFORE.decode(),
        BEFORE.decode(),
        BEFORE.decode(),
        then=WRONG,
    )
    branched = inject_branches(monkeypatch, b" *", b" -")  # every branch spells the input again: no change
    runs = tmp_path / "runs"
    result = fix(tiny_dir, "--tries", "2", "--test", f"echo run >> {runs}; {GREP_TEST}", "--json")
    assert result.exit_code == 3, result.output  # no try passed its checks
    assert (work / "a.py").read_bytes() == BEFORE
    assert calls == [4] and runs.read_text() == "run\n"  # try 1's candidate 1 alone reached the test
    data = json.loads(result.stdout)
    assert sorted(t["candidate"] for t in data["tries"] if t["try"] == 1) == [1, 2, 3, 4]
    later = [t for t in data["tries"] if t["try"] == 2]
    assert sorted(t["candidate"] for t in later) == list(range(1, 9))
    first = next(t for t in later if t["candidate"] == 1)
    assert (
        first["error"] == "the same as try 1's candidate 1"
        and [c["name"] for c in first["checks"]] == ["syntax", "names", "kept", "body", "public", "change", "test"]
        and not first["checks"][-1]["passed"]
    )  # its checks, carried, not run again
    assert all(c["seconds"] == 0.0 for c in first["checks"])
    assert all((t["error"] or "").startswith("the same as ") for t in later)
    assert "try 2 of 2, candidate 1 of 8: the same as try 1's candidate 1" in result.stderr
    assert "try 1 of 2, candidate 1 of 4: failed: test" in result.stderr
    # try 2 is told where try 1 branched, so it branches elsewhere (pipeline.branch_points' `taken`)
    (ids, points, before), (_, _, told) = branched
    assert not before and told == {branch_key(ids, p) for p in points} and told


def test_a_first_candidate_that_passes_makes_no_branches(tiny_dir, work, scripted_rows, monkeypatch):
    """Branches are decoded only after candidate 1 failed: one that passes is the whole try, one line."""
    scripted_rows(GOOD, WRONG, WRONG, WRONG)
    inject_branches(monkeypatch, b" +", b" *")
    result = fix(tiny_dir, "--test", GREP_TEST, "--json", "--write")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(t["try"], t["candidate"], t["passed"]) for t in data["tries"]] == [(1, 1, True)]
    assert [line for line in result.stderr.splitlines() if ": try " in line] == [
        line for line in result.stderr.splitlines() if "try 1 of 3, candidate 1 of 4: passed" in line
    ]
    assert (work / "a.py").read_text() == GOOD


def test_candidates_by_sample_decodes_every_candidate_from_the_start(tiny_dir, work, scripted_rows):
    """--candidates-by sample: all four decoded side by side from the start, checked in order."""
    calls = scripted_rows(WRONG, GOOD, WRONG, BEFORE.decode())
    result = fix(tiny_dir, "--test", GREP_TEST, "--json", "--candidates-by", "sample")
    assert result.exit_code == 0, result.output
    assert calls == [4] and json.loads(result.stdout)["answer_candidate"] == 2
    bad = fix(tiny_dir, "--candidates-by", "beam")
    assert bad.exit_code == 2 and "--candidates-by" in bad.output and (work / "a.py").read_bytes() == BEFORE


def test_fix_with_candidates_takes_the_first_that_passes_its_test(tiny_dir, work, scripted_rows):
    calls = scripted_rows(WRONG, GOOD, WRONG, BEFORE.decode())
    result = fix(tiny_dir, "--candidates", "4", "--candidates-by", "sample", "--test", GREP_TEST, "--json", "--write")
    assert result.exit_code == 0, result.output
    assert calls == [4]  # one batched decode of 4 rows, no second try
    assert (work / "a.py").read_text() == GOOD
    data = json.loads(result.stdout)
    assert data["passed"] and data["answer_try"] == 1 and data["answer_candidate"] == 2
    tries = data["tries"]
    assert sorted(t["candidate"] for t in tries) == [1, 2, 3, 4] and {t["try"] for t in tries} == {1}
    logprobs = [t["logprob"] for t in tries]
    assert logprobs == sorted(logprobs, reverse=True)  # checked in the model's order of likelihood
    order = [t["candidate"] for t in tries]
    winner = order.index(2)
    for t in tries[:winner]:  # every candidate more likely than the winner was checked and failed, or a duplicate
        assert not t["passed"]
        assert (t["error"] or "").startswith("the same as candidate") or any(not c["passed"] for c in t["checks"])
    for t in tries[winner + 1 :]:  # the rest were not tested
        assert t["checks"] == [] and not t["passed"]
        assert t["error"] in (
            "not checked: candidate 2 passed first",
            "the same as candidate 1",
            "the same as candidate 3",
        )
    assert [c["name"] for c in tries[winner]["checks"]] == [
        "syntax",
        "names",
        "kept",
        "body",
        "public",
        "change",
        "test",
    ]
    assert [t for t in tries if t["candidate"] == 4][0]["changed"] is False
    wrong = [t for t in tries if t["candidate"] in (1, 3)]  # the same text twice: checked at most once
    assert sum(1 for t in wrong if t["checks"]) <= 1


def test_fix_with_candidates_without_test_takes_the_likeliest_that_changes_the_file(tiny_dir, work, scripted_rows):
    scripted_rows(GOOD, WRONG, BEFORE.decode())
    result = fix(tiny_dir, "--candidates", "3", "--candidates-by", "sample", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    changing = [t for t in data["tries"] if t["candidate"] in (1, 2)]
    likeliest = max(changing, key=lambda t: t["logprob"])
    assert data["answer_candidate"] == likeliest["candidate"]
    assert (work / "a.py").read_bytes() == BEFORE  # no --write: nothing written
    assert data["diff"] and ("a + b" in data["diff"]) == (likeliest["candidate"] == 1)


def test_when_no_candidate_passes_the_next_try_is_k_candidates_again_with_the_feedback(tiny_dir, work, scripted_rows):
    calls = scripted_rows(WRONG, WRONG, then=GOOD)  # both rows of try 2 spell GOOD
    result = invoke(
        [
            "fix",
            "a.py",
            "Fix the bug.",
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--candidates",
            "2",
            "--candidates-by",
            "sample",
            "--test",
            GREP_TEST,
            "--json",
        ]
    )
    assert result.exit_code == 0, result.output
    assert calls == [2]  # try 1's batch (try 2's rows are scripted alike)
    lines = [line for line in result.stderr.splitlines() if ": try " in line]
    assert len(lines) == 4 and all(f"try {n} of 3, candidate " in "".join(lines[2 * n - 2 : 2 * n]) for n in (1, 2))
    assert "candidate 2 of 2" in "".join(lines[:2]) and "candidate 2 of 2" in "".join(lines[2:])
    assert "passed" in "".join(lines[2:]) and "the same as candidate 1" in "".join(lines[2:])
    data = json.loads(result.stdout)
    assert data["answer_try"] == 2 and sorted(t["candidate"] for t in data["tries"] if t["try"] == 2) == [1, 2]


def test_candidates_out_of_range_is_a_usage_error(tiny_dir, work):
    result = fix(tiny_dir, "--candidates", "0")
    assert result.exit_code == 2 and "--candidates" in result.output
    assert (work / "a.py").read_bytes() == BEFORE


def test_candidates_in_a_scoped_edit(tiny_dir, work, scripted_rows, monkeypatch):
    scripted_rows("    return a * b\n", "    return a + b\n")  # the region's lines only
    inject_branches(monkeypatch, b" *", b" +")  # candidate 2 branches from candidate 1 in the region
    result = fix(tiny_dir, "--candidates", "2", "--test", GREP_TEST, "--lines", "2", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer_candidate"] == 2 and data["scope"]
    assert all(t["regions"] == [[2, 2]] for t in data["tries"])


# -- the benchmark ---------------------------------------------------------------------------------


def test_bench_candidates_times_k_rows_against_one_and_judges_each_by_the_test(tmp_path, tiny_dir, scripted_rows):
    buggy, fixed = "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n"
    scripted_rows(buggy, fixed, "def add(a, b):\n    return a * b\n", buggy)  # the single decode: the first
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps(
            {
                "id": "add",
                "language": "python",
                "before": buggy,
                "after": fixed,
                "instruction": "Fix add.",
                "test": "assert add(2, 3) == 5\n",
            }
        )
        + "\n"
    )
    out = tmp_path / "c.json"
    result = invoke(
        [
            "bench",
            "candidates",
            "-c",
            str(corpus),
            "--model",
            str(tiny_dir),
            "-k",
            "4",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    (row,) = data["corpora"][0]["cases"]
    assert row["passed"] == [False, True, False, False] and row["pass_k"] and not row["pass_one"]
    assert row["distinct"] == 3 and row["greedy_same"] and row["k"] == 4
    assert row["one_seconds"] > 0 and row["k_seconds"] > 0 and row["ratio"] == row["k_seconds"] / row["one_seconds"]
    assert row["k_forwards"] >= 1 and len(row["logprobs"]) == 4
    summary = data["corpora"][0]["summary"]
    assert summary["pass_k"] == 1 and summary["pass_one"] == 0 and summary["n"] == 1
    assert "any of 4 1/1" in result.stdout
    assert row["regions"] == [[1, 2]] and data["scoped"]  # "Fix add." scoped as `cadedit fix` scopes it
    whole = invoke(
        [
            "bench",
            "candidates",
            "-c",
            str(corpus),
            "--model",
            str(tiny_dir),
            "-k",
            "4",
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--scoping",
            "off",
            "--json",
            str(out),
        ]
    )
    assert whole.exit_code == 0, whole.output
    data = json.loads(out.read_text())
    assert data["corpora"][0]["cases"][0]["regions"] == [] and not data["scoped"]


def test_program_mode_rows_each_spell_their_own_program_with_splices():
    from cadedit.backends.model import encode
    from cadedit.text.oracle import oracle
    from cadedit.decode.pipeline import grammar_for
    from cadedit.text.program import format
    from cadedit.text.resolve import to_display_program
    from tests.tinytok import make_tokenizer

    loaded = LoadedModel(make_model(), make_tokenizer(), "tiny", "cpu", torch.float32, 1, 4096, 0.0)
    before = Document.from_text("def add(a, b):\n    return a - b\n\n\nprint(add(1, 2))\n", "case.py")
    afters = [before.text.replace("a - b", "a + b"), before.text.replace("print", "x = 1\nprint"), before.text]
    picks = []
    for after in afters:
        target = format(to_display_program(oracle(before, Document.from_text(after, "case.py")), before))
        spelled = script_sampler(target, grammar_for(loaded).vocab.tokens, lambda t: encode(loaded.tokenizer, t))
        picks.append(given(spelled))
    found = edit_candidates(before, "Edit.", EditOptions(mode=Mode.PROGRAM), picks, loaded=loaded)
    assert [c.result.new_text for c in found] == afters
    assert all(c.result.stats.copies >= 1 for c in found)  # copied lines were spliced into each row


class Counting(CachedLM):
    """A CachedLM that counts the tokens its forwards compute."""

    def __init__(self, model, cache):
        super().__init__(model, cache)
        self.computed = 0

    def feed_rows(self, rows, ids, keeps):
        self.computed += sum(map(len, ids))
        return super().feed_rows(rows, ids, keeps)


def test_rows_that_agree_are_computed_once(tiny):
    from dataclasses import replace

    document = Document.from_text("".join(random.Random(3).sample(CORPUS, 8)), "x.py")
    prepared = replace(prepared_for(tiny, document, 90), mode=Mode.VERIFY)
    alone_lm, rows_lm = Counting(tiny.model, new_cache(tiny)), Counting(tiny.model, new_cache(tiny))
    alone = run_rows(alone_lm, rows_for(tiny, prepared, [Sampling()], Mode.VERIFY), prepared)[0]
    same = run_rows(rows_lm, rows_for(tiny, prepared, [Sampling()] * 3, Mode.VERIFY), prepared)
    assert all(row.ids == alone.ids for row in same)
    assert rows_lm.computed == alone_lm.computed  # three greedy rows cost one
    mixed_lm = Counting(tiny.model, new_cache(tiny))
    run_rows(mixed_lm, rows_for(tiny, prepared, [Sampling(), Sampling(), Sampling(1.0, 1.0, 5)], Mode.VERIFY), prepared)
    assert alone_lm.computed < mixed_lm.computed < 3 * alone_lm.computed


def test_a_row_that_runs_far_past_candidate_1_is_stopped(tiny_dir):
    from cadedit.decode import loop as decode
    from cadedit.backends.model import load_model

    loaded = load_model(str(tiny_dir), dtype="fp32", threads=1)
    document = Document.from_text("def add(a, b):\n    return a - b\n", "solution.py")
    prepared = pipeline.prepare(loaded, document, "Fix add.", EditOptions())
    texts = [document.text, "".join(f"x{k} = {k}\n" for k in range(40))]  # the second is never drafted
    picks = [script_sampler(t + prepared.fence + "\n", token_bytes(loaded)) for t in texts]
    first, second = pipeline.run_candidates(loaded, document, prepared, picks)
    assert first.decoded is not None and first.decoded.text.startswith(document.text)
    forwards = first.decoded.stats.forward_passes
    assert second.decoded is None and second.error.message.startswith(
        f"stopped after {decode.row_limit(forwards)} forwards"
    )


# -- branches ------------------------------------------------------------------------------------


def forcing_picker(at: int, token: int):
    """Greedy, except that the pick at ids index `at` is `token` (a branch's reference decode)."""
    greedy = sampler_for()

    def pick(logits, mask, ids, guess=None):
        return token if len(ids) == at else greedy(logits, mask, ids, guess)

    return pick


def branches_against_forced_decodes(loaded: LoadedModel, prepared, n: int = 3, rel: float = 1e-9):
    """Decode greedily with the hesitations recorded, branch n rows from it (decode_branches, from that
    decode's cache) and check each row against a fresh decode that forces its alternative: the same
    ids, text and log-probability, the cache it branched from left as it was. Returns the rows."""
    from cadedit.decode.loop import branch, decode_branches
    from cadedit.decode.pipeline import branch_points

    lm = CachedLM(loaded.model, new_cache(loaded))
    cursor, _, drafter = pipeline.mode_parts(loaded, None, prepared, True)
    first = Row(cursor, sampler_for(), drafter, record=True)
    run_rows(lm, [first], prepared)
    assert len(first.alternatives) >= n and all(a.margin >= 0 for a in first.alternatives)
    points = branch_points(first.alternatives, first.ids, n, token_bytes(loaded))
    held = list(lm.ids)
    rows, prefixes = [], []
    for alternative in points:
        cursor, _, drafter = pipeline.mode_parts(loaded, None, prepared, True)
        row = Row(cursor, sampler_for(), drafter, score=True)
        branch(row, first.ids, alternative)
        rows.append(row)
        prefixes.append(list(prepared.prompt_ids) + first.ids[: alternative.at])
    for _ in decode_branches(lm, rows, held, prefixes, prepared.budget, [10**6] * len(rows)):
        pass
    assert lm.ids == held and not lm.rows  # the cache it branched from is untouched, the rows dropped
    for row, alternative in zip(rows, points):
        cursor, _, drafter = pipeline.mode_parts(loaded, None, prepared, True)
        reference = Row(cursor, forcing_picker(alternative.at, alternative.token), drafter, score=True)
        run_rows(CachedLM(loaded.model, new_cache(loaded)), [reference], prepared)
        assert row.ids[: alternative.at] == first.ids[: alternative.at] and row.ids[alternative.at] == alternative.token
        assert row.ids == reference.ids and row.cursor.text() == reference.cursor.text()
        assert (row.error is None) == reference.cursor.is_done()
        assert row.logprob == pytest.approx(reference.logprob, rel=rel, abs=rel)
    return rows


@pytest.mark.parametrize("seed", range(3))
def test_a_branch_writes_what_a_fresh_decode_forced_to_its_alternative_writes(tiny, seed):
    from dataclasses import replace

    document = Document.from_text("".join(random.Random(seed).sample(CORPUS, 8)), "x.py")
    prepared = replace(prepared_for(tiny, document, 90), mode=Mode.VERIFY)
    rows = branches_against_forced_decodes(tiny, prepared)
    assert len({tuple(row.ids) for row in rows}) == len(rows)  # each branch is another candidate


def test_branch_points_take_the_nearest_ties_and_leave_out_splits_of_the_picked_token():
    from cadedit.decode.pipeline import branch_points
    from cadedit.results import Alternative

    tokens = [b"", b"ab", b"a", b"x", b"b", b"y"]
    ids = [1, 4, 4]  # "ab", "b", "b"
    alternatives = [
        Alternative(0, 2, 0.1, -1.0),  # "a" only splits "ab": left out
        Alternative(1, 3, 0.5, -2.0),
        Alternative(2, 5, 0.2, -3.0),
    ]
    assert [(a.at, a.token) for a in branch_points(alternatives, ids, 2, tokens)] == [(2, 5), (1, 3)]
    assert [(a.at, a.token) for a in branch_points(alternatives, ids, 1, tokens)] == [(2, 5)]


def test_branch_points_leave_out_the_points_an_earlier_try_took():
    from cadedit.decode.pipeline import branch_points
    from cadedit.results import Alternative

    tokens, ids = [b"", b"a", b"b", b"c", b"d"], [1, 2, 2]
    alternatives = [Alternative(0, 3, 0.1, -1.0), Alternative(1, 4, 0.2, -1.0), Alternative(2, 3, 0.3, -1.0)]
    taken = {branch_key(ids, alternatives[0])}
    assert [(a.at, a.token) for a in branch_points(alternatives, ids, 2, tokens, taken=taken)] == [(1, 4), (2, 3)]
    assert branch_key(ids, alternatives[2]) != branch_key([1, 3, 2], alternatives[2])  # the answer before it counts


def test_branch_points_leave_out_alternatives_that_would_write_the_answer_again():
    """One token for two of the answer's ("ab" for "a" "b") spells it again; one that ends the code as the
    answer does with another whitespace before the fence ("}\n\n" for "}\n") writes it again too."""
    from cadedit.decode.pipeline import branch_points
    from cadedit.results import Alternative

    tokens = [b"", b"a", b"b", b"ab", b"}\n", b"}\n\n", b"```", b"c", b"}"]
    ids = [1, 2, 4, 6]  # "a" "b" "}\n" "```"
    alternatives = [
        Alternative(0, 3, 0.1, -1.0),
        Alternative(2, 5, 0.2, -1.0),
        Alternative(1, 7, 0.3, -1.0),
        Alternative(2, 8, 0.4, -1.0),
    ]
    assert [(a.at, a.token) for a in branch_points(alternatives, ids, 3, tokens, "```")] == [(1, 7)]
    assert [(a.at, a.token) for a in branch_points(alternatives, ids, 3, tokens)] == [(2, 5), (1, 7)]


def test_the_branches_report_their_progress_after_candidate_1(tiny):
    """on_step follows candidate 1's decode, then the branches' (a status line keeps moving)."""
    from cadedit.tries.loop import branch_factories

    document = Document.from_bytes(BEFORE, "a.py")
    options = EditOptions(mode=Mode.VERIFY, max_new_tokens=40)
    steps, at_check = [], []
    found = pipeline.edit_branches(
        document,
        "Fix the bug.",
        options,
        branch_factories(3, options.sampling),
        lambda first: at_check.append(len(steps)) or False,
        loaded=tiny,
        on_step=lambda stats, step: steps.append(stats.forward_passes),
    )
    assert len(found) == 3 and at_check[0] > 0 and len(steps) > at_check[0]
    assert steps[at_check[0]] == 1  # the branches' count starts again


def test_a_branch_that_writes_what_the_file_lacks_may_take_a_forward_per_token_of_candidate_1(
    tiny_dir, work, scripted_rows, monkeypatch
):
    """Candidate 1 copies a long file in a few drafted forwards; the branches fix line 2 and then write
    lines the file lacks, one token a forward (no draft to take). They may take a forward per token
    candidate 1 wrote after the branch point (decode.branch_limit), where twice candidate 1's forwards
    plus the slack would stop them before the end: the fix passes."""
    from cadedit.decode import loop as decode

    tail = "".join(f"x{k} = {k}\n" for k in range(30))
    fixed = GOOD + "".join(f"y{k} = [{k}]\n" for k in range(30))
    result, data, first, branched = fixed_by_a_branch(tiny_dir, work, scripted_rows, monkeypatch, tail, fixed)
    assert "candidate 1 of 4: failed: change (the edit changed nothing)" in result.stderr
    forwards = [
        int(line.split(" forward passes")[0].rsplit(" ", 1)[1])
        for line in result.stderr.splitlines()
        if "forward passes" in line and "try 1 of 3" in line
    ]
    assert forwards[data["answer_candidate"] - 1] > decode.row_limit(forwards[0])  # past the cap by forwards alone
    assert branched["tokens_new"] <= first["tokens_new"] + decode.ROW_SLACK


def test_a_branch_that_writes_candidate_1s_text_again_takes_its_rest_without_decoding_it(
    tiny_dir, work, scripted_rows, monkeypatch
):
    """Candidate 1 copies a 42-line file unchanged; the branches fix line 2 and then spell candidate 1's
    rest. Once a branch has written REJOIN_TOKENS ids of candidate 1's answer again it takes the rest
    as its own (decode.REJOIN_TOKENS) instead of verifying it: the fix passes and is written whole,
    the branch decoded a few tokens past its branch point, and its statistics count the rest as copied."""
    from cadedit.decode import loop as decode

    tail = "".join(f"x{k} = {k}\n" for k in range(40))
    _, data, first, branched = fixed_by_a_branch(tiny_dir, work, scripted_rows, monkeypatch, tail, GOOD + tail)
    assert data["answer_candidate"] > 1
    rest = len(encode(TOK, tail))
    assert first["tokens_new"] > rest  # candidate 1 decoded (drafted and verified) every token
    assert branched["tokens_new"] < rest // 2  # the branch stopped decoding soon after its fix
    assert branched["tokens_copied"] >= rest - decode.REJOIN_TOKENS  # and took candidate 1's rest


def fixed_by_a_branch(tiny_dir, work, scripted_rows, monkeypatch, tail: str, fixed: str):
    """`cadedit fix --test GREP_TEST --json --write` on BEFORE + tail: candidate 1 copies the file, the
    branches take " +" for line 2's " -" and spell `fixed`, which passes in try 1 and is written.
    Returns the CLI's result, its JSON, and the JSON of candidate 1 and of the branch that passed."""
    (work / "a.py").write_text(BEFORE.decode() + tail)
    scripted_rows(BEFORE.decode() + tail, fixed, fixed, fixed)
    inject_branches(monkeypatch, b" -", b" +")
    result = fix(tiny_dir, "--test", GREP_TEST, "--json", "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_text() == fixed
    data = json.loads(result.stdout)
    first, branched = data["tries"][0], data["tries"][data["answer_candidate"] - 1]
    assert first["candidate"] == 1 and not first["changed"] and data["answer_try"] == 1
    return result, data, first, branched


def test_later_tries_decode_their_branches_to_the_end(tiny_dir, work, monkeypatch):
    """The branches fix line 2, agree with candidate 1 for 39 lines, then change the last line too. In
    try 1 (settings.REJOIN_TRIES) a branch takes candidate 1's rest once it has written a stretch of it
    again, so its answer keeps candidate 1's last line and fails the test; try 2 decodes its branches
    to the end, and the fix passes there."""
    from cadedit.decode import loop as decode

    tail = "".join(f"x{k} = {k}\n" for k in range(40))
    (work / "a.py").write_text(BEFORE.decode() + tail)
    fixed = GOOD + tail.replace("x39 = 39", "x39 = 99")
    copy, fix_both = (
        spelling(lambda prepared, answer=answer: answer + prepared.fence + "\n")
        for answer in (BEFORE.decode() + tail, fixed)
    )
    inject_picks(monkeypatch, lambda k: [copy] + [fix_both] * (3 if k == 1 else 7) if k else None)
    inject_branches(monkeypatch, b" -", b" +")
    test = "grep -q 'a + b' a.py && grep -q 'x39 = 99' a.py || { echo 'expected the fix'; exit 1; }"
    result = fix(tiny_dir, "--test", test, "--json", "--write", "--tries", "2")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_text() == fixed
    data = json.loads(result.stdout)
    first_try = [t for t in data["tries"] if t["try"] == 1]
    assert data["answer_try"] == 2 and data["answer_candidate"] > 1
    assert [t["checks"][-1]["detail"] for t in first_try if t["candidate"] > 1 and t["checks"]] == ["exit 1"]
    rest = len(encode(TOK, tail))
    assert first_try[1]["tokens_copied"] >= rest - decode.REJOIN_TOKENS  # try 1's branch took candidate 1's rest
