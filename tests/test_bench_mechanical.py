"""`cadedit bench mechanical`: the corpus's parts and expected files, and the command end to end on its
first tune cases (three exact renames and a deletion cadedit must hand to the model), no model loaded."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cadedit.bench import mechanical as mech
from cadedit.cli import root as cli


def test_the_corpus_has_both_parts_an_expected_file_per_exact_case_and_its_licence():
    cases = mech.load_cases()
    assert {c.part for c in cases} == {"tune", "heldout"} and {c.expect for c in cases} == {"exact", "fallback"}
    for case in cases:
        assert (mech.CORPUS / case.file).is_file()
        assert (mech.CORPUS / "expected" / f"{case.id}.py").is_file() == (case.expect == "exact"), case.id
    assert "Python Software Foundation" in (mech.CORPUS / "LICENSE-PSF.txt").read_text()


def test_the_command_counts_exact_fallback_and_wrong(tmp_path):
    out = tmp_path / "mechanical.json"
    result = CliRunner().invoke(cli.app, ["bench", "mechanical", "--part", "tune", "--limit", "4", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        "getopt-rename-do_longs: 'Rename the function do_longs to parse_long_options': exact (exit 0, " in result.stderr
    )
    assert "getopt-delete-used: 'Delete the function short_has_arg': fallback (exit 1, " in result.stderr
    data = json.loads(out.read_text())
    tune = data["summary"]["tune"]
    assert (tune["cases"], tune["exact"], tune["fallback"], tune["fallback_expected"], tune["wrong"]) == (4, 3, 1, 1, 0)
    assert all(c["edit_seconds"] is not None for c in data["cases"] if c["verdict"] == "exact")


def test_an_unknown_part_is_a_usage_error():
    result = CliRunner().invoke(cli.app, ["bench", "mechanical", "--part", "dev"])
    assert result.exit_code == 2 and "--part" in result.output
