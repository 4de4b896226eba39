"""`cadedit bench everyday`: the judge on hand-made results, and the command end to end on the tiny
random model (whose answers never pass: every case is honest, the files untouched)."""

from __future__ import annotations

import json
import pytest
from typer.testing import CliRunner

from cadedit.cli import root as cli
from cadedit.bench import everyday as ev

CASES = {c.instruction: c for c in ev.load_cases()}
COLORSYS = (ev.CORPUS / "dev" / "colorsys.py").read_text()
SHLEX = (ev.CORPUS / "dev" / "shlex.py").read_text()
DOCSTRING = CASES["Add a docstring to yiq_to_rgb"]
DELETE = CASES["Delete the join function"]
JOIN = SHLEX[SHLEX.index("def join(") : SHLEX.index("_find_unsafe =")]


def test_the_corpus_has_a_held_out_part_and_every_case_names_its_probes():
    parts = {c.part for c in CASES.values()}
    assert parts == {"dev", "heldout"} and all(c.probes for c in CASES.values())
    assert "Python Software Foundation" in (ev.CORPUS / "LICENSE-PSF.txt").read_text()


@pytest.mark.parametrize(
    "after, code, verdict, destructive, why",
    [
        (
            COLORSYS.replace("def yiq_to_rgb(y, i, q):\n", 'def yiq_to_rgb(y, i, q):\n    """YIQ to RGB."""\n'),
            0,
            "right",
            False,
            "",
        ),
        (COLORSYS, 3, "honest", False, "exit 3, file untouched"),
        (
            COLORSYS.replace("    return (r, g, b)\n\n\n# HLS", '    """YIQ to RGB."""\n\n\n# HLS'),
            0,
            "wrong",
            True,
            "yiq_to_rgb(0.5, 0.1, 0.1): (0.6570438799076213, 0.4089521274513641, 0.5600461893764435) before, None after",
        ),
        (
            COLORSYS.replace("def yiq_to_rgb(y, i, q):\n", "def yiq_to_rgb(y, i, q: Optional[float]):\n"),
            0,
            "wrong",
            True,
            "the module no longer imports: NameError: name 'Optional' is not defined",
        ),
        (
            COLORSYS.replace("    if r < 0.0:\n        r = 0.0\n", "    if r < 0.0:\n        r = 0.0  # clamp\n", 1),
            0,
            "wrong",
            False,
            "no new docstring",
        ),
    ],
)
def test_the_judge_runs_the_module(after, code, verdict, destructive, why):
    assert ev.judge(DOCSTRING, COLORSYS, after, code) == (verdict, destructive, why)


def test_a_deletion_is_right_only_with_all_updated():
    gone = SHLEX.replace(JOIN, "")
    assert ev.judge(DELETE, SHLEX, gone, 0) == ("wrong", False, "still in __all__")
    assert ev.judge(DELETE, SHLEX, gone.replace(', "join"]', "]"), 0) == ("right", False, "")


def test_the_command_runs_cadedit_fix_on_a_copy_and_reports(tiny_dir, tmp_path):
    out, corpus_file = tmp_path / "everyday.json", ev.CORPUS / "heldout" / "fnmatch.py"
    original = corpus_file.read_bytes()
    result = CliRunner().invoke(
        cli.app,
        ["bench", "everyday", "--model", str(tiny_dir), "--part", "heldout", "--limit", "1", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "heldout/fnmatch.py: 'Add type hints to fnmatchcase': honest (exit 3, " in result.stderr
    assert "heldout: 1 cases: 0 right, 1 honest, 0 wrong but passed, 0 destructive and written" in result.stderr
    data = json.loads(out.read_text())
    assert data["summary"]["all"] == {"cases": 1, "right": 0, "honest": 1, "wrong": 0, "destructive_written": 0}
    assert corpus_file.read_bytes() == original  # the run edits a copy


def test_an_unknown_part_is_a_usage_error():
    assert CliRunner().invoke(cli.app, ["bench", "everyday", "--part", "test"]).exit_code == 2
