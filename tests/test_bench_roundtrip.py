"""Round trip (Table 4) and endpoint perturbation (Table 8) on small corpora made here."""

from __future__ import annotations

import pytest

from cadedit.bench import perturb as pt
from cadedit.bench import roundtrip as rt
from cadedit.bench.corpus import case_from_record
from cadedit.text.program import Copy, Gen, Program
from tests.bench_helpers import CASES, record

CORPUS = [case_from_record(r, f"t:{k}") for k, r in enumerate(CASES, 1)]


def test_every_case_round_trips_byte_exactly_in_both_modes():
    results = [rt.roundtrip_case(c) for c in CORPUS]
    summary = rt.summarize(results)
    assert summary["n"] == 5 and summary["program_text_roundtrip"] == 5
    for mode in ("strict", "clipped"):
        assert summary["modes"][mode] == {"exact": 5, "trimmed": 5, "out_of_range": 0, "failures": []}


def test_reserved_literal_audit_names_the_golds_that_need_escaping():
    summary = rt.summarize([rt.roundtrip_case(c) for c in CORPUS])
    assert summary["reserved_literal_golds"] == ["reserved"]


def test_a_wrong_program_is_counted_as_a_failure(monkeypatch):
    monkeypatch.setattr(rt, "oracle", lambda before, after: Program((Copy(1, 1), Gen("x\n"), Copy(9, 9))))
    result = rt.roundtrip_case(CORPUS[0])
    strict, clipped = result.modes["strict"], result.modes["clipped"]
    assert not strict.exact and "the file has 4 lines" in strict.error
    assert not clipped.exact and clipped.warnings == 1 and clipped.error is None
    summary = rt.summarize([result])
    assert summary["modes"]["strict"]["failures"][0]["id"] == "fix"
    assert summary["modes"]["clipped"]["out_of_range"] == 1


def test_trimmed_match_forgives_only_surrounding_whitespace(monkeypatch):
    case = case_from_record(record("t", "a\nb\n", "a\nb\n"), "t:1")
    monkeypatch.setattr(rt, "oracle", lambda before, after: Program((Copy(1, 2), Gen("\n"))))
    mode = rt.roundtrip_case(case).modes["strict"]
    assert (mode.exact, mode.trimmed) == (False, True)


# -- perturbation ------------------------------------------------------------------------------

MANY = [
    case_from_record(
        record(
            f"c{k}",
            "".join(f"line {i}\n" for i in range(12)),
            "".join(f"line {i}\n" if i != 6 else "changed\n" for i in range(12)),
        ),
        f"t:{k}",
    )
    for k in range(6)
]


@pytest.mark.parametrize(
    "run, programs",
    [(pt.run_trial, pt.oracle_programs), (pt.run_paper_trial, lambda cs: [pt.paper_program(c) for c in cs])],
)
def test_no_noise_is_exact_and_noise_breaks_matches(run, programs):
    progs = programs(MANY)
    assert run(MANY, progs, 0, 0, seed=1).trimmed == len(MANY)
    noisy = [run(MANY, progs, 2, t, seed=1) for t in range(4)]
    assert sum(t.trimmed for t in noisy) < 4 * len(MANY)


def test_trials_are_reproducible_per_seed_eps_and_trial():
    progs = pt.oracle_programs(MANY)
    first = [pt.run_trial(MANY, progs, 1, t, seed=7) for t in range(3)]
    again = [pt.run_trial(MANY, progs, 1, t, seed=7) for t in range(3)]
    assert first == again
    assert pt.trial_rng(7, 1, 0).random() != pt.trial_rng(7, 1, 1).random()


def test_paper_resolver_joins_lines_and_empties_reversed_ranges():
    before = "a\nb\nc".split("\n")
    rng = pt.trial_rng(0, 0, 0)
    assert pt.paper_resolve([(1, 1), ["X"], (3, 3)], before, 0, rng) == "a\nX\nc"
    assert pt.paper_resolve([(3, 2), ["X"]], before, 0, rng) == "X"  # reversed: a Python slice is empty


def test_summary_reports_median_and_mean_over_trials():
    trials = [pt.Trial(1, t, trimmed, trimmed, 10) for t, trimmed in enumerate((1, 2, 6))]
    (row,) = pt.summarize(trials)
    assert row["trials"] == 3 and row["trimmed_median"] == pytest.approx(0.2)
    assert row["trimmed_mean"] == pytest.approx(0.3)
    assert row["per_trial_trimmed"] == [0.1, 0.2, 0.6]
