"""The per-machine measurement cache keeps every answer, also those stored while another was measured:
the backend probe measures the dtype and the step kernels inside its own measurement, and its write
dropped them, so the first run measured the dtype twice."""

from __future__ import annotations

import json

from cadedit.backends import hardware
from cadedit.settings import user_cache


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
