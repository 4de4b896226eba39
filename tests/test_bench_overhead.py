"""`cadedit bench overhead` through the CLI with the tiny model: two fresh `cadedit fix` processes on
a copy of the file, their figures from --json, and the one-token step in each dtype."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cadedit.cli.root import app


def test_overhead_runs_two_fix_processes_and_times_the_step_in_every_dtype(tiny_dir, tmp_path):
    tiny = tiny_dir
    source = tmp_path / "f.py"
    source.write_text("def f(x):\n    return x\n")
    out = tmp_path / "overhead.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "overhead",
            "--model",
            str(tiny),
            "--file",
            str(source),
            "--threads",
            "1",
            "--dtype",
            "fp32",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert len(data["runs"]) == 2
    for run in data["runs"]:
        # The random model's answer may be anything; a run either reports its figures or its error.
        assert run["wall"] > 0 and ("error" in run or run["load_phases"])
    assert set(data["step_ms"]) == {"fp32", "bf16", "bf16-int8", "bf16-int4"}
    assert all(ms > 0 for ms in data["step_ms"].values())
    assert "one-token step after a 1,024-token prefix: fp32" in result.output and "bf16-int8" in result.output
    assert source.read_text() == "def f(x):\n    return x\n"  # edits went to a copy
