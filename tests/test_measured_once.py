"""The per-machine measurement cache keeps every answer, also those stored while another was measured:
the backend probe measures the dtype and the step kernels inside its own measurement, and its write
dropped them, so the first run measured the dtype twice. A damaged cache is ignored with a note."""

from __future__ import annotations

import json

import pytest

from cadedit.backends import hardware
from cadedit.settings import user_cache
from tests.test_tries_cli import start_cadedit, work  # noqa: F401 - fixtures


def test_an_answer_stored_during_a_measurement_survives_it():
    calls = []

    def inner() -> str:
        calls.append("inner")
        return "bfloat16"

    def outer() -> str:
        hardware._measured_once("dtype", ("float32", "bfloat16"), inner)
        return "torch"

    assert hardware._measured_once("backend", ("torch", "llama"), outer)[0] == "torch"
    assert json.loads(user_cache("cpu-dtype.json").read_text()) == {"dtype": "bfloat16", "backend": "torch"}
    assert hardware._measured_once("dtype", ("float32", "bfloat16"), inner)[0] == "bfloat16"
    assert calls == ["inner"]


@pytest.mark.parametrize("damage", ["[" * 100_000, "{not json", "[1, 2]"], ids=["deep", "not-json", "a-list"])
def test_fix_with_a_damaged_measurement_cache_ignores_it_measures_again_and_edits(work, tiny_dir, damage):
    """Damaged (JSON nested past the parser's depth, not JSON, not a table): a note, never an internal error."""
    cache = user_cache("cpu-dtype.json")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(damage)
    proc = start_cadedit(work, tiny_dir, "--dtype", "auto", "--tries", "1")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and b"internal error" not in err, err
    assert b"+    return a + b" in out
    assert (
        err.count(f"{cache}: not a measurement cache (damaged?); ignored, and measured again where needed".encode())
        == 1
    )
    assert isinstance(json.loads(cache.read_text()), dict)  # measured again and stored
