"""Verify draft lengths fitted to what a forward of k tokens costs (cadedit.backends.forward_cost): the cost
curve is measured from the model's own forwards (here a fake LM on a fake clock, steep or flat),
drafts chosen from a steep curve stay short where a flat curve's are long, the answer is the same
either way (and the same as one token a forward), the fitted lengths cost less than the fixed
schedule on a steep curve, and the real CLI measures once and reads the cache after."""

from __future__ import annotations

import json
import random
import re
import statistics

import pytest

from cadedit.backends import hardware
from cadedit.backends.forward_cost import MOST, WIDTHS, CostCurve, FittedLengths, measure_curve
from cadedit.backends.model import LoadedModel
from cadedit.decode import pipeline
from cadedit.options import EditOptions, Mode
from cadedit.settings import user_cache
from cadedit.decode.verify import Schedule, VerifyDrafter
from cadedit.text.document import Document
from tests.test_verify import CORPUS, FENCE, TOK, TOKEN_BYTES, ScriptedLM, encode_text, run_loop
from tests.scripting import scripted_sampler
from tests.tinymodel import make_model


def steep(k: int) -> float:
    """A CPU where wide forwards cost nearly their width: 16 tokens ~4 steps, 64 ~13 (llama.cpp on one thread)."""
    return 0.8 + 0.19 * k


def flat(k: int) -> float:
    """bf16 with AMX: up to 16 tokens cost about one step, 256 about three."""
    return 1.0 + max(0, k - 16) / 120


def stepped(k: int) -> float:
    """torch with compact one-token step weights: a one-token step is cheap, any wider forward reads
    the full weights (two tokens ~2.2 steps), then the width costs little more."""
    return 1.0 if k == 1 else 2.2 + max(0, k - 2) / 60


class ClockLM:
    """A decode.LM on a fake clock: each feed of k ids advances it by cost(k); ids is its cache."""

    def __init__(self, cost):
        self.cost, self.now = cost, 0.0
        self.ids: list[int] = []

    def clock(self) -> float:
        return self.now

    def feed(self, ids, keep=1):
        self.now += self.cost(len(ids))
        self.ids += list(ids)

    def crop(self, n):
        del self.ids[len(self.ids) - n :]


@pytest.mark.parametrize("cost", [steep, flat])
def test_the_curve_is_what_forwards_of_each_width_cost_relative_to_one_token(cost):
    lm = ClockLM(cost)
    curve = measure_curve(lm, vocab=500, room=4096, clock=lm.clock)
    assert [k for k, _ in curve.points] == list(WIDTHS)
    for k, c in curve.points:
        assert c == pytest.approx(cost(k) / cost(1), rel=1e-2)
    assert lm.ids == []  # the cache is left as it was
    assert curve.cost(40) == pytest.approx((cost(16) + (cost(64) - cost(16)) / 2) / cost(1), rel=1e-2)


def test_a_small_context_measures_the_widths_that_fit():
    lm = ClockLM(steep)
    curve = measure_curve(lm, vocab=500, room=200, clock=lm.clock)
    assert [k for k, _ in curve.points] == [1, 2, 4, 16, 64]
    assert curve.cost(512) > curve.cost(64)  # past the last width: along the last two


def curve_of(cost) -> CostCurve:
    return CostCurve(tuple((k, cost(k) / cost(1)) for k in WIDTHS))


def test_uncertain_acceptance_drafts_short_on_a_steep_curve_and_long_on_a_flat_one():
    for p, steep_most, flat_least in ((0.9, 8, 16), (0.97, 16, 48)):
        assert curve_of(steep).best_draft(p, 256) <= steep_most
        assert curve_of(flat).best_draft(p, 256) >= flat_least
    # Everything kept: long drafts on both (a wide forward still yields more per step than a narrow one).
    assert curve_of(steep).best_draft(0.999, 256) >= 64 and curve_of(flat).best_draft(0.999, 256) == 256


def test_no_draft_where_even_the_shortest_does_not_pay_for_its_width():
    # Two tokens cost 2.2 steps: a draft pays only where its tokens are likely kept.
    assert curve_of(stepped).best_draft(0.4, 256) == 0
    assert curve_of(stepped).best_draft(0.9, 256) >= 16
    # Where a two-token forward costs about a step, even an unlikely draft is worth sending.
    assert curve_of(flat).best_draft(0.4, 256) > 0 and curve_of(steep).best_draft(0.4, 256) > 0
    lengths = FittedLengths(curve_of(stepped))
    sizes = [lengths.after(16, 16, 0) for _ in range(12)]  # one draft missed after another
    assert sizes[-1] == 0 and sizes[0] > 0
    sizes = [lengths.after(1, 1, 1) for _ in range(4)]  # then the output follows the source again
    assert sizes[-1] > 0


def renamed_every_third_line(lines: list[str]) -> list[str]:
    """The first name of every third non-blank line renamed (`x` -> `x_1`), the rest of the line as it was."""
    out = list(lines)
    for k in range(1, len(out), 3):
        found = re.search(r"[A-Za-z_]\w*", out[k])
        if found:
            out[k] = out[k][: found.end()] + "_1" + out[k][found.end() :]
    return out


def decode_with(lengths, before: list[str], after: list[str]):
    """The loop over a scripted model writing `after`; the drafter's source is `before`."""
    prompt, target = [5, 6, 7], encode_text("".join(after) + FENCE + "\n")
    drafter = None
    if lengths is not None:
        drafter = VerifyDrafter("".join(before) + FENCE + "\n", encode_text, TOKEN_BYTES, 10_000, lengths)
    run = run_loop(ScriptedLM(len(prompt), target, TOK.eos_token_id), prompt, 10_000, drafter)
    return run, drafter


def steps_cost(run, cost) -> float:
    """The decode's forwards in one-token steps on a CPU with this cost (the prompt's forward left out)."""
    return sum(cost(step.sampled + step.forced + step.drafted) / cost(1) for step in run.steps if not step.prompt)


def test_fitted_lengths_differ_by_curve_and_leave_the_answer_as_it_is():
    rng = random.Random(3)
    before = [rng.choice(CORPUS) for _ in range(90)]
    after = renamed_every_third_line(before)
    assert after != before
    greedy, _ = decode_with(None, before, after)
    on_steep, steep_drafter = decode_with(FittedLengths(curve_of(steep)), before, after)
    on_flat, flat_drafter = decode_with(FittedLengths(curve_of(flat)), before, after)
    assert on_steep.ids == on_flat.ids == greedy.ids
    assert statistics.median(steep_drafter.sizes) <= 16 < statistics.median(flat_drafter.sizes)
    assert max(steep_drafter.sizes) < max(flat_drafter.sizes)
    # Each curve's own lengths cost it less than the other's, and less than the fixed schedule's.
    fixed, _ = decode_with(Schedule(), before, after)
    assert fixed.ids == greedy.ids
    assert steps_cost(on_steep, steep) < min(steps_cost(on_flat, steep), steps_cost(fixed, steep))
    assert steps_cost(on_flat, flat) <= min(steps_cost(on_steep, flat), steps_cost(fixed, flat))


def test_an_unchanged_answer_drafts_long_even_on_a_steep_curve():
    before = CORPUS * 3
    greedy, _ = decode_with(None, before, before)
    run, drafter = decode_with(FittedLengths(curve_of(steep)), before, before)
    assert run.ids == greedy.ids
    assert run.stats.forward_passes <= len(greedy.ids) // 40
    assert max(drafter.sizes) >= 128


def test_a_long_unchanged_answer_drafts_as_wide_as_the_backend_allows():
    """On a backend that keeps any number of logits rows in one forward (torch), an answer that keeps
    its source drafts past 256 tokens once the drafts are all kept, in fewer forwards."""
    before = CORPUS * 12
    greedy, _ = decode_with(None, before, before)
    narrow, _ = decode_with(FittedLengths(curve_of(flat), 256), before, before)
    run, drafter = decode_with(FittedLengths(curve_of(flat), MOST["torch"]), before, before)
    assert run.ids == narrow.ids == greedy.ids and len(greedy.ids) > 2000
    assert max(drafter.sizes) >= 512
    assert run.stats.forward_passes < narrow.stats.forward_passes
    assert MOST["llama"] == 256  # llama.cpp returns at most this many rows a call


def test_a_first_draft_in_the_other_indentation_is_a_choice_not_a_miss():
    """A method asked for without its class's indentation, written with it: the first draft (the
    region as shown) misses at its first token, which is where the text in the file's indentation
    goes on, so the draft lengths do not shrink as after a miss; a first token neither text has does
    shrink them."""
    dedented = "".join(CORPUS[:20]) + FENCE + "\n"
    indented = "".join("    " + line if line.strip() else line for line in CORPUS[:20]) + FENCE + "\n"
    sizes = {}
    for first in ("indented", "neither"):
        drafter = VerifyDrafter(
            dedented, encode_text, TOKEN_BYTES, 10_000, FittedLengths(curve_of(stepped)), also=(indented, "")
        )
        asked = drafter.size
        drafter(None, [])
        taken = encode_text(indented)[:1] if first == "indented" else encode_text("import os\n")[:1]
        draft = drafter(None, taken)
        sizes[first] = drafter.size
        if first == "indented":
            assert drafter.size == asked
            assert (
                b"".join(TOKEN_BYTES[t] for t in taken + draft)
                == indented.encode()[: len(b"".join(TOKEN_BYTES[t] for t in taken + draft))]
            )
    assert sizes["neither"] < sizes["indented"]


class AlwaysDraft(FittedLengths):
    """Fitted lengths that never choose no draft (a one-token draft at least)."""

    def first(self) -> int:
        return max(1, super().first())

    def after(self, size: int, drafted: int, kept: int) -> int:
        return max(1, super().after(size, drafted, kept))


def test_new_text_is_written_without_drafts_that_do_not_pay_and_drafting_resumes_after_it():
    """A function whose body gets a 12-line block of new text (a docstring's words, which the source's
    lines match only by chance): on a CPU where any draft costs two steps, the drafts stop while they
    keep missing (scored, not sent), come back once the output follows the source again, and the
    answer is the one-token-at-a-time answer at less cost than drafting everywhere."""
    rng = random.Random(5)
    before = [rng.choice(CORPUS) for _ in range(60)]
    words = "the value of each line is kept as it is while another one is written".split()
    new = ['    """' + " ".join(rng.choice(words) for _ in range(9)) + "\n" for _ in range(12)]
    after = before[:30] + new + before[30:]
    greedy, _ = decode_with(None, before, after)
    run, drafter = decode_with(FittedLengths(curve_of(stepped)), before, after)
    always, _ = decode_with(AlwaysDraft(curve_of(stepped)), before, after)
    assert run.ids == always.ids == greedy.ids
    assert drafter.shadows > 0
    assert steps_cost(run, stepped) < 0.9 * steps_cost(always, stepped)
    # The 30 unchanged lines after the new text are drafted again, not written a token a forward.
    tail = len(encode_text("".join(before[30:]) + FENCE + "\n"))
    last = [step for step in run.steps if not step.prompt][-tail:]
    assert sum(step.drafted for step in last) > tail // 2


def test_the_cli_measures_the_costs_once_and_reads_them_after(tmp_path, monkeypatch, tiny_dir, run_cli):
    monkeypatch.delenv("CADEDIT_DRAFT_LENGTHS")  # the default: fitted lengths
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text("def add(a, b):\n    return a - b\n")
    args = (
        "fix",
        "a.py",
        "Fix add.",
        "--model",
        str(tiny_dir),
        "--max-new-tokens",
        "40",
        "--tries",
        "1",
        "--allow-no-change",
        "--threads",
    )
    first = run_cli(*args, "1", cwd=tmp_path)
    assert first.returncode in (0, 3), first.stderr
    assert b"measuring what a forward of 1 to 256 tokens costs" in first.stderr
    assert b"a forward of k tokens costs k=1: 1.0, k=2: " in first.stderr
    stored = {
        key: value
        for key, value in json.loads(user_cache("cpu-dtype.json").read_text()).items()
        if "|forward-costs-" in key
    }
    assert len(stored) == 1 and [k for k, _ in next(iter(stored.values()))] == list(WIDTHS)
    second = run_cli(*args, "1", cwd=tmp_path)
    assert second.returncode in (0, 3), second.stderr
    assert b"measuring what a forward" not in second.stderr
    # Another thread count is another measurement.
    third = run_cli(*args, "2", cwd=tmp_path)
    assert b"measuring what a forward" in third.stderr


def test_a_loaded_model_looks_its_curve_up_once_for_all_its_decodes(monkeypatch):
    """Every verify decode (each candidate, each try) sizes its drafts from the curve; a loaded model
    looks it up in the measurement cache (or measures it) once: the cache emptied after the first
    decode is neither measured again nor written by the later ones."""
    monkeypatch.delenv("CADEDIT_DRAFT_LENGTHS")  # the default: fitted lengths
    told: list[str] = []
    monkeypatch.setattr(hardware, "progress", told.append)
    loaded = LoadedModel(make_model(), TOK, "tiny", "cpu", "float32", 1, 4096, 0.0)
    document = Document.from_text("".join(CORPUS[:8]), "x.py")
    prepared = pipeline.prepare(loaded, document, "Fix it.", EditOptions(mode=Mode.VERIFY, max_new_tokens=400))
    stored = user_cache("cpu-dtype.json")
    for k in range(3):
        decoded = pipeline.run_decode(
            loaded, document, prepared, scripted_sampler(loaded, document, prepared, document)
        )
        assert decoded.stats.drafts_kept > 0
        if k == 0:
            assert "|forward-costs-" in stored.read_text()
            stored.unlink()
    assert len([line for line in told if line.startswith("measuring what a forward")]) == 1
    assert not stored.exists()


FIX = ("fix", "a.py", "Fix add.", "--max-new-tokens", "40", "--tries", "1", "--allow-no-change", "--threads", "1")


def test_fixed_draft_lengths_measure_nothing(tmp_path, monkeypatch, tiny_dir, run_cli):
    monkeypatch.setenv("CADEDIT_DRAFT_LENGTHS", "fixed")
    (tmp_path / "a.py").write_text("def add(a, b):\n    return a - b\n")
    done = run_cli(*FIX, "--model", str(tiny_dir), cwd=tmp_path)
    assert done.returncode in (0, 3), done.stderr
    assert b"measuring what a forward" not in done.stderr
    assert (
        not user_cache("cpu-dtype.json").exists() or "|forward-costs-" not in user_cache("cpu-dtype.json").read_text()
    )


def test_an_unknown_draft_lengths_value_is_one_line_and_touches_nothing(tmp_path, monkeypatch, tiny_dir, run_cli):
    monkeypatch.setenv("CADEDIT_DRAFT_LENGTHS", "long")
    (tmp_path / "a.py").write_text("def add(a, b):\n    return a - b\n")
    done = run_cli(*FIX, "--model", str(tiny_dir), "--write", cwd=tmp_path)
    assert done.returncode == 1
    assert b"error: CADEDIT_DRAFT_LENGTHS='long': expected one of fitted, fixed" in done.stderr
    assert b"Traceback" not in done.stderr
    assert (tmp_path / "a.py").read_text() == "def add(a, b):\n    return a - b\n"
