"""`cadedit bench multiline` through the CLI on the tiny model, answers scripted through the real
decode loop: a rename judged against its gold answer and drafted in few forwards, an answer that
misses its check reported as not done, both parts of the corpus summarised; and the repo's corpus
is well formed (every gold applies, every check holds on no answer but a right one)."""

from __future__ import annotations

import json

import pytest

from cadedit.bench.multiline import (
    CORPUS,
    Rates,
    floor_parts,
    floor_seconds,
    gold_text,
    judge,
    load_cases,
    measure_rates,
)
from cadedit.decode.loop import script_sampler
from cadedit.text.document import Document
from cadedit.backends.model import encode, load_model, token_bytes
from cadedit.prompt.regions import scoped_source
from tests.scripting import inject_picks, invoke
from tests.test_bench_peers import fake_llama  # noqa: F401 - fixture: a fake llama_cpp module
from tests.test_tries_cli import _models, load_once  # noqa: F401 - fixtures: each model folder loads once

SOURCE = '''\
import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def describe(self, digits):
        area = math.pi * self.radius ** 2
        rounded = round(area, digits)
        text = f"circle of area {rounded}"
        if digits > 3:
            text = text + " (precise)"
        return text
'''
RENAMED = SOURCE.replace("rounded", "area_rounded")
CASES = [
    {
        "id": "rename",
        "split": "tune",
        "file": "shapes.py",
        "instruction": "In Circle.describe, rename the local variable rounded to area_rounded.",
        "gold": {"between": ["    def describe", "        return text"], "replace": [["rounded", "area_rounded"]]},
    },
    {
        "id": "hints",
        "split": "heldout",
        "file": "shapes.py",
        "instruction": "In Circle.describe, add a type hint to digits.",
        "check": {"present": [r"digits: int"]},
    },
]


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    (folder / "files").mkdir(parents=True)
    (folder / "files" / "shapes.py").write_text(SOURCE)
    (folder / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    return folder


def answering(monkeypatch, *texts: str) -> None:
    """Case k's try answers texts[k] (the file it should make), in the scoped form a model writes."""
    calls = []

    def picks(k: int):
        def make_sampler(loaded, document, prepared):
            after = Document.from_text(texts[len(calls)])
            calls.append(prepared)
            answer = scoped_source(after, prepared.fence, prepared.regions, prepared.headers)
            return script_sampler(answer, token_bytes(loaded), lambda text: encode(loaded.tokenizer, text))

        return make_sampler if k else None

    inject_picks(monkeypatch, picks)


def test_bench_multiline_reports_forwards_floor_and_whether_each_answer_did_what_was_asked(
    tmp_path, monkeypatch, tiny_dir, corpus
):
    monkeypatch.chdir(tmp_path)
    # case 2 (add type hints) is answered with a changed comparison and no hint: cadedit's checks fail it
    answering(monkeypatch, RENAMED, SOURCE.replace("digits > 3", "digits >= 3"))
    result = invoke(
        [
            "bench",
            "multiline",
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--corpus",
            str(corpus),
            "--json",
            "out.json",
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out.json").read_text())
    rename, hints = data["rows"]
    assert (rename["id"], rename["ok"], rename["passed"]) == ("rename", True, True)
    assert rename["changed_lines"] == 2 and 2 <= rename["changed_tokens"] <= 12
    assert rename["forwards"] <= rename["forward_bound"] == rename["changed_tokens"] + 3 * 2 + 5
    assert rename["tokens_copied"] > 0 and rename["floor"] > 0 and rename["over_floor"] > 0
    assert (hints["id"], hints["ok"], hints["why"]) == ("hints", False, "no answer passed cadedit's checks")
    assert data["summary"]["tune"]["ok"] == 1 and data["summary"]["heldout"]["ok"] == 0
    assert data["prefill_ms_per_token"] > 0 and data["step_ms"] > 0
    # The floor: the case's prompt and copied tokens prefilled after it, its changed tokens as steps.
    assert rename["floor_prefill"] > 0 and rename["floor_step_ms"] > 0
    steps = min(rename["changed_tokens"], rename["tokens_new"])
    assert rename["floor"] == pytest.approx(rename["floor_prefill"] + steps * rename["floor_step_ms"] / 1000)
    assert 0 < rename["floor_flat"] and "tune: wall / flat-rate floor (every prefilled token" in result.stdout
    # What a k-token forward costs: measured once before the cases (and said), kept with the results.
    assert [k for k, _ in data["forward_costs"]] == [1, 2, 4, 16, 64, 256]
    assert "measuring what a forward of 1 to 256 tokens costs" in result.stderr
    assert "tune: 1/1 done as asked, 1/1 within the forward bound" in result.stdout
    assert "heldout: 0/1 done as asked" in result.stdout


def test_bench_multiline_refuses_a_folder_without_cases(tmp_path, tiny_dir):
    result = invoke(["bench", "multiline", "--model", str(tiny_dir), "--corpus", str(tmp_path)])
    assert result.exit_code == 1
    assert f"{tmp_path}: no cases.jsonl" in result.output


def test_the_repo_corpus_has_both_parts_and_its_golds_and_checks_hold():
    cases = load_cases(CORPUS)
    assert {c["split"] for c in cases} == {"tune", "heldout"} and len(cases) >= 12
    assert any(c["file"].endswith(".js") for c in cases) and any(c["file"].endswith(".py") for c in cases)
    for case in cases:
        assert judge(case, None) == (False, "no answer passed cadedit's checks")
        if "gold" in case:
            after = gold_text(case["before"], case["gold"])
            assert after != case["before"] and judge(case, after) == (True, "")
        else:  # the file as it is does not pass a case's check
            assert not judge(case, case["before"])[0] or "same_code" in case["check"], case["id"]


def test_llama_lookup_answers_each_cases_first_prompt_beside_cadedit(
    tmp_path, monkeypatch, tiny_dir, corpus, fake_llama
):
    """--llama-lookup: llama.cpp with prompt lookup (a fake llama_cpp module, tests/test_bench_peers.py)
    gets the prompt of cadedit's first try byte for byte and the same budget; its answer is judged
    as cadedit's is; each row and each part's summary carry its forwards and wall beside cadedit's."""
    from cadedit.decode import pipeline
    from cadedit.bench.multiline import case_request
    from cadedit.backends.model import load_model, token_bytes
    from tests.test_bench_peers import FakeLlama, fake_piece

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("cadedit.bench.multiline.lookup_gguf", lambda loaded: tmp_path / "model.gguf")
    answering(monkeypatch, RENAMED, SOURCE)
    loaded = load_model(str(tiny_dir), "cpu", "fp32", 1)
    prompts = {}
    for case in CASES:
        case = {**case, "before": SOURCE}
        document, options = case_request(loaded, case)
        prepared = pipeline.prepare(loaded, document, case["instruction"], options)
        prompt = b"".join(token_bytes(loaded)[t] for t in prepared.prompt_ids)
        after = Document.from_text(RENAMED if case["id"] == "rename" else SOURCE)
        prompts[prompt] = scoped_source(after, prepared.fence, prepared.regions, prepared.headers).encode()
    monkeypatch.setattr(FakeLlama, "answer", staticmethod(lambda prompt: prompts[prompt] + b"<|im_end|>"))
    result = invoke(
        [
            "bench",
            "multiline",
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--corpus",
            str(corpus),
            "--llama-lookup",
            "--json",
            "out.json",
        ]
    )
    assert result.exit_code == 0, result.output
    ((llm),) = FakeLlama.made
    assert [b"".join(fake_piece(t, True) for t in tokens) for tokens, _ in llm.generated] == list(prompts)
    assert llm.kwargs["n_threads"] == 1 and llm.kwargs["draft_model"].num_pred_tokens == 10
    data = json.loads((tmp_path / "out.json").read_text())
    rename, hints = data["rows"]
    assert (rename["llama_ok"], hints["llama_ok"]) == (True, False)
    assert 1 < rename["llama_forwards"] < rename["llama_tokens_new"]  # the prompt's forward, then 4 tokens a forward
    assert data["summary"]["tune"]["median_llama_over_cadedit"] == rename["llama_wall"] / rename["wall"]
    assert data["llama_lookup"]["draft"] == "LlamaPromptLookupDecoding(num_pred_tokens=10)"
    assert (
        "tune: 1/1 done as asked" in result.stdout
        and "llama.cpp with prompt lookup: 1/1 done as asked" in result.stdout
    )


def test_llama_lookup_needs_a_gguf(tmp_path, tiny_dir, corpus, fake_llama):
    result = invoke(["bench", "multiline", "--model", str(tiny_dir), "--corpus", str(corpus), "--llama-lookup"])
    assert result.exit_code == 2
    assert "--llama-lookup runs the model's GGUF" in result.output


def test_the_floor_prefills_the_prompt_and_copies_as_one_feed_measured_after_the_case(tiny_dir):
    """A try's floor is its prompt and copied tokens fed as one prefill (the decode feeds a prompt so)
    and its changed tokens as steps, measured of that many tokens; the flat floor charges every
    prefilled token the rate of a short prefill."""
    # 300 prompt tokens, 100 new of which 10 changed: 390 prefilled, 10 steps; at most the new ones
    assert floor_parts(300, 100, 10) == (390, 10) and floor_parts(300, 5, 10) == (300, 5)
    own = Rates(prefill_seconds=2.0, prefill_tokens=390, step_ms=100.0)
    assert floor_seconds(390, 10, own) == pytest.approx(3.0)
    short = Rates(prefill_seconds=1.0, prefill_tokens=256, step_ms=50.0)
    assert floor_seconds(390, 10, short) == pytest.approx(390 / 256 + 0.5)
    loaded = load_model(str(tiny_dir), dtype="fp32", threads=1)
    measured = measure_rates(loaded, 390)
    assert measured.prefill_tokens == 390 and measured.prefill_seconds > 0 and measured.step_ms > 0
    assert measure_rates(loaded, 10**9).prefill_tokens <= loaded.context_limit  # never past the context
