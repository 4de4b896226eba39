"""`cadedit bench decode` with the tiny random Qwen2: oracle programs forced through the real loop
(they must resolve to the gold byte for byte, CRLF and reserved literals included), regeneration
timed beside them, and the bound of eq. (3) from ceiling.bounds, the one implementation."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cadedit.bench import decode as dc
from cadedit.bench.ceiling import CaseCeiling, SpeedupCurve
from cadedit.cli.root import app
from tests.bench_helpers import CASES, write_corpus

CURVE = {"results": [{"n": 1, "speedup": 1.0}, {"n": 4, "speedup": 2.0}, {"n": 64, "speedup": 8.0}]}


def invoke(*args: str):
    return CliRunner().invoke(app, ["bench", "decode", *args])


def run(tmp_path, tiny_dir, *extra: str) -> dict:
    corpus = write_corpus(tmp_path / "small.jsonl", CASES)
    out = tmp_path / f"decode{len(extra)}.json"
    result = invoke(
        "-c", str(corpus), "--model", str(tiny_dir), "--dtype", "fp32", "--threads", "1", "--json", str(out), *extra
    )
    assert result.exit_code == 0, result.output
    assert "eq. (3) bound" in result.stdout and "fix: T=" in result.stderr
    return json.loads(out.read_text())


def test_oracle_programs_through_the_loop_beside_regeneration_and_the_bound(tmp_path, tiny_dir):
    kernel = tmp_path / "k.json"
    kernel.write_text(json.dumps(CURVE))
    data = run(tmp_path, tiny_dir, "--kernel", str(kernel))
    assert data["partial"] is False and data["draft"] is True and data["kernel"] == str(kernel)
    (small,) = data["corpora"]
    cases = {c["id"]: c for c in small["cases"]}
    assert list(cases) == [r["id"] for r in CASES]
    s = SpeedupCurve((1, 4, 64), (1.0, 2.0, 8.0))
    for c in cases.values():
        assert c["forward_passes"] > 0 and c["cad_seconds"] > 0 and c["regen_seconds"] > 0
        assert c["ratio"] == pytest.approx(c["regen_seconds"] / c["cad_seconds"])
        # eq. (3): T / (T_gen + sum N_k / s(N_k)) over the oracle program's splices
        assert c["bound"] == pytest.approx(c["T"] / (c["T"] - sum(c["spans"]) + sum(n / s(n) for n in c["spans"])))
    assert cases["fix"]["tokens_spliced"] == sum(cases["fix"]["spans"]) > 0
    summary = small["summary"]
    assert summary["n"] == len(CASES) and summary["pooled_ratio"] == pytest.approx(
        sum(c["regen_seconds"] for c in cases.values()) / sum(c["cad_seconds"] for c in cases.values())
    )
    T = sum(c["T"] for c in cases.values())
    spans = [n for c in cases.values() for n in c["spans"]]
    assert summary["pooled_bound"] == pytest.approx(T / (T - sum(spans) + sum(n / s(n) for n in spans)))
    assert summary["of_bound"] == pytest.approx(summary["pooled_ratio"] / summary["pooled_bound"])


def test_the_paper_loop_without_drafts_needs_more_forwards_and_s_n_is_measured_when_not_given(tmp_path, tiny_dir):
    drafted = run(tmp_path, tiny_dir, "--spans", "1,4", "--trials", "1")
    plain = run(tmp_path, tiny_dir, "--spans", "1,4", "--trials", "1", "--no-draft")
    assert plain["draft"] is False and drafted["kernel"].startswith("measured, P=")
    assert drafted["curve"]["n"] == [1, 4] and all(v > 0 for v in drafted["curve"]["s"])
    forwards = [sum(c["forward_passes"] for c in d["corpora"][0]["cases"]) for d in (drafted, plain)]
    assert forwards[1] > forwards[0]


def test_bound_pools_the_rows_spans():
    rows = [
        dc.OracleRow("a", CaseCeiling("a", 10, (4,)), 1, 1, 1, 4, 1.0, 2.0),
        dc.OracleRow("b", CaseCeiling("b", 6, ()), 1, 1, 1, 0, 1.0, 1.0),
    ]
    curve = SpeedupCurve((1, 4), (1.0, 4.0))
    assert dc.bound(rows, curve) == pytest.approx(16 / (12 + 4 / 4.0))
    assert dc.summarize(rows, curve)["pooled_ratio"] == pytest.approx(1.5)


def test_bad_spans_are_a_usage_error(tmp_path):
    corpus = write_corpus(tmp_path / "small.jsonl", CASES)
    assert invoke("-c", str(corpus), "--spans", "0,4").exit_code == 2
