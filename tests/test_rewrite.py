"""The whole-file rewrite modes: the fence prompt, the shared stopping rule, parsing the output back
into the file's own newlines (CRLF, BOM, no final newline), and the three decoders end to end on a
tiny Qwen2 whose weights are set to write one known edit (a bigram model: layers silenced, so the
next token depends on the current one only)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from cadedit import rewrite as R
from cadedit.document import Document
from cadedit.errors import BudgetError, ModelError
from cadedit.model import LoadedModel
from cadedit.program import Copy, Gen, Program
from cadedit.resolve import resolve
from cadedit.vocab import vocab_from_tokenizer
from tests.tinymodel import make_model
from tests.tinytok import make_tokenizer

TOK = make_tokenizer()
TOKEN_BYTES = vocab_from_tokenizer(TOK).tokens
BEFORE = "red:\nteal;\nblue)\n"
AFTER = "red:\ngreen;\nblue)\n"  # each of its tokens is always followed by the same token: a bigram can write it


def loaded_from(model, dtype=torch.float32, context=4096) -> LoadedModel:
    return LoadedModel(model, TOK, "tiny", "cpu", dtype, 1, context, 0.0)


def bigram_model(first_after: int, text: str):
    """A tiny Qwen2 that, after token `first_after`, greedily writes `text` and then EOS.

    Attention and MLP outputs are zeroed, so the residual stream is the current token's
    embedding; each token of the chain gets its own embedding dimension, and the LM head row of
    its successor reads that dimension. Any other token embeds to 0 and leads nowhere."""
    chain = [first_after, *TOK.encode(text), TOK.eos_token_id]
    model = make_model(0)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        slots: dict[int, int] = {}
        for current, following in zip(chain, chain[1:]):
            if current in slots:
                assert model.lm_head.weight[following, slots[current]] == 1.0, "not a bigram text"
                continue
            slots[current] = len(slots)
            model.model.embed_tokens.weight[current, slots[current]] = 1.0
            model.lm_head.weight[following, slots[current]] = 1.0
    return model


def editing_model(document: Document, text: str = AFTER) -> LoadedModel:
    """The bigram model that answers the rewrite prompt of `document` with `text`."""
    request = R.prepare_rewrite(loaded_from(make_model(0)), document, "Rename teal to green.")
    return loaded_from(bigram_model(request.prompt_ids[-1], text))


# -- pure parts --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "fence"), [("x = 1\n", "```"), ("s = '```'\n", "````"), ("`````\n", "``````")])
def test_the_fence_is_longer_than_any_backtick_run_in_the_file(text, fence):
    assert R.fence_for(text) == fence


def test_the_prompt_shows_the_file_in_a_fence_and_opens_the_answer_with_one():
    document = Document.from_text("x = 1\ny = 2", "src/calc.py")
    request = R.prepare_rewrite(loaded_from(make_model(0)), document, "Set y to 3.")
    prompt = TOK.decode(list(request.prompt_ids))
    assert "Instruction: Set y to 3.\n\nFile calc.py (2 lines):\n```python\nx = 1\ny = 2\n```\n\nInstruction: Set y to 3.\n" in prompt
    assert "Reply with the complete file, all 2 lines, with the instruction applied." in prompt
    assert prompt.endswith("<|im_start|>assistant\n```python\n")
    assert request.source == "x = 1\ny = 2\n```\n"


HAND_VOCAB = (b"x", b"\n", b"``", b"`", b"```\n", b"\n```", b"<eos>", b"y")
EOS = frozenset({6})


@pytest.mark.parametrize(("tokens", "stops_after"), [
    ([0, 1, 2, 3, 1, 0], 5),  # "x\n" "``" "`" "\n": the fence line ends on the fifth token
    ([0, 5, 1, 0], 3),  # "x" "\n```" "\n"
    ([4, 0], 1),  # a fence on the first line: an empty file
    ([0, 2, 3, 1, 0], None),  # "x```\n": not alone on its line
    ([0, 1, 6, 0], 3),  # EOS
    ([0, 7, 1, 0, 7, 1], None),
])
def test_the_stopper_finds_the_closing_fence_across_token_seams(tokens, stops_after):
    stopper = R.Stopper(HAND_VOCAB, EOS, "```")
    fed = [stopper.feed(t) for t in tokens]
    assert (fed.index(True) + 1 if True in fed else None) == stops_after


def test_output_keeps_tokens_up_to_the_stop_and_the_budget():
    output = R.Output(R.Stopper(HAND_VOCAB, EOS, "```"), budget=10)
    assert [output.add(t) for t in (0, 1, 6)] == [False, False, True]
    assert output.ids == [0, 1] and output.finished
    output = R.Output(R.Stopper(HAND_VOCAB, EOS, "```"), budget=2)
    assert [output.add(t) for t in (0, 1)] == [False, True]
    assert not output.finished


@pytest.mark.parametrize(("output", "before", "expected"), [
    ("a\nb\n```\n", "a\n", "a\nb\n"),
    ("a\nb\n```", "a\n", "a\nb\n"),  # EOS right after the fence
    ("a\nb\n", "a\n", "a\nb\n"),  # EOS without a fence
    ("a\n```\nThis fixes it.\n", "a\n", "a\n"),
    ("a\nc\n```\n", "a\nb", "a\nc"),  # the file had no final newline: it keeps none
    ("```\n", "a\n", ""),
    ("a\n  ```\nb\n", "a\n", "a\n  ```\nb\n"),  # an indented fence is file content
    ("a\x0c```\nb\n```\n", "a\n", "a\x0c```\nb\n"),  # only "\n" ends a line
])
def test_output_text_is_the_file_before_the_closing_fence(output, before, expected):
    assert R.output_text(output, "```", Document.from_text(before)) == expected


@pytest.mark.parametrize(("before", "new_display", "after"), [
    ("a = 1\r\nb = 2\r\nc = 3\r\n", "a = 1\nb = 20\nc = 3\n", "a = 1\r\nb = 20\r\nc = 3\r\n"),
    ("\ufeffimport os\nx = 1\n", "import sys\nx = 1\n", "\ufeffimport sys\nx = 1\n"),
    ("\ufeffimport os\nx = 1\n", "import os\nx = 2\n", "\ufeffimport os\nx = 2\n"),
    ("x = 1\ny = 2", "x = 1\ny = 3", "x = 1\ny = 3"),
    ("a\rb\r", "a\nc\n", "a\rc\r"),
    ("a\r\nb\nc\r\n", "a\nB\nc\n", "a\r\nB\r\nc\r\n"),  # kept lines keep their own ending
    ("a\n\tb  \n", "a\n\tb  \nc\n", "a\n\tb  \nc\n"),
    ("", "new\n", "new\n"),
])
def test_the_rewrite_as_a_program_keeps_the_files_own_newlines(before, new_display, after):
    document = Document.from_text(before)
    program = R.program_for(document, new_display)
    assert resolve(program, document) == after
    kept = sum(op.end - op.start + 1 for op in program.ops if isinstance(op, Copy))
    assert kept == sum(1 for a, b in zip(document.display_lines(), new_display.splitlines()) if a == b)


def test_a_file_too_large_for_the_context_is_refused_before_any_model_work():
    document = Document.from_text("x = 1\n" * 400, "big.py")
    with pytest.raises(ModelError, match="too large") as info:
        R.prepare_rewrite(loaded_from(make_model(0), context=512), document, "Fix it.")
    assert "400 lines" in info.value.message


# -- the decoders on a model that writes a known edit --------------------------------------------


@pytest.mark.parametrize("mode", R.MODES)
def test_every_mode_writes_the_models_edit(mode):
    document = Document.from_text(BEFORE, "colors.txt")
    result = R.rewrite_file(document, "Rename teal to green.", mode, editing_model(document))
    assert result.new_text == AFTER
    assert result.program == Program((Copy(1, 1), Gen("green;\n"), Copy(3, 3)))
    assert resolve(result.program, document) == result.new_text
    assert result.changed and result.stats.tokens_new >= len(TOK.encode(AFTER))
    assert 1 <= result.stats.forward_passes <= len(TOK.encode(AFTER)) + 1


def test_verify_accepts_the_models_own_lines_in_few_forwards():
    document = Document.from_text(BEFORE, "colors.txt")
    loaded = editing_model(document)
    rewrite = R.rewrite_file(document, "Rename.", "rewrite", loaded)
    verify = R.rewrite_file(document, "Rename.", "verify", loaded)
    assert verify.output_ids == rewrite.output_ids
    assert rewrite.stats.forward_passes == len(TOK.encode(AFTER)) + 1  # one per token, and one for the EOS
    assert verify.stats.tokens_accepted >= 2 and verify.stats.forward_passes < rewrite.stats.forward_passes
    assert verify.stats.drafts_proposed >= 1


@pytest.mark.parametrize("mode", ["rewrite", "verify"])
def test_progress_sees_each_forward(mode):
    document = Document.from_text(BEFORE, "colors.txt")
    seen = []
    result = R.rewrite_file(document, "Rename.", mode, editing_model(document),
                            on_step=lambda stats, step: seen.append(stats.forward_passes))
    assert seen == sorted(seen) and seen[-1] == result.stats.forward_passes


def test_crlf_bom_and_no_final_newline_survive_every_mode():
    document = Document.from_text("\ufeffred:\r\nteal;\r\nblue)", "colors.txt")
    loaded = editing_model(document)
    for mode in R.MODES:
        result = R.rewrite_file(document, "Rename teal to green.", mode, loaded)
        assert result.new_text == "\ufeffred:\r\ngreen;\r\nblue)", mode


def test_running_out_of_budget_writes_nothing():
    document = Document.from_text(BEFORE, "colors.txt")
    with pytest.raises(BudgetError, match="budget of 3 new tokens"):
        R.rewrite_file(document, "Rename.", "verify", editing_model(document), max_new_tokens=3)


def test_lookup_is_greedy_whatever_the_models_generation_config_says():
    """Prompt lookup through generate() returns the explicit loop's ids even when the model's
    generation config asks for sampling and a repetition penalty (Qwen's hub configs do)."""
    model = make_model(1).double()
    model.generation_config.do_sample = True
    model.generation_config.repetition_penalty = 1.5
    model.generation_config.temperature = 0.7
    loaded = loaded_from(model, torch.float64)
    rng = random.Random(1)
    document = Document.from_text("".join(rng.choice(["x = 1\n", "def f():\n", "    return 2\n"]) for _ in range(6)))
    request = R.prepare_rewrite(loaded, document, "Fix it.", max_new_tokens=40)
    rewrite, lookup = R.generate(loaded, request, "rewrite"), R.generate(loaded, request, "lookup")
    assert lookup.ids == rewrite.ids and len(lookup.ids) == 40
    assert isinstance(TOK.decode(list(lookup.ids)), str)


def test_an_unknown_mode_is_refused():
    document = Document.from_text(BEFORE)
    with pytest.raises(ModelError, match="unknown mode"):
        R.rewrite_file(document, "x", "fastest", editing_model(document))


# -- `cadedit fix --mode ...` --------------------------------------------------------------------


@pytest.fixture(scope="module")
def editing_dir(tmp_path_factory):
    """The bigram model that rewrites teal to green, saved as a model folder for --model."""
    folder = tmp_path_factory.mktemp("models") / "teal-to-green"
    editing_model(Document.from_text(BEFORE, "colors.txt")).model.save_pretrained(str(folder))
    TOK.save_pretrained(str(folder))
    return folder


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "colors.txt").write_bytes(b"red:\r\nteal;\r\nblue)\r\n")
    return tmp_path


def fix(*args: str, input: bytes | None = None):
    from typer.testing import CliRunner

    from cadedit import cli

    return CliRunner().invoke(cli.app, ["fix", *args], input=input)


@pytest.mark.parametrize("mode", R.MODES)
def test_fix_mode_prints_a_diff_that_applies(work, editing_dir, mode):
    result = fix("colors.txt", "Rename teal to green.", "--model", str(editing_dir), "--mode", mode)
    assert result.exit_code == 0, result.output
    assert b"-teal;\r\n+green;\r\n" in result.stdout_bytes
    assert (work / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"
    written = fix("colors.txt", "Rename teal to green.", "--model", str(editing_dir), "--mode", mode, "--write", "-q")
    assert written.exit_code == 0, written.output
    assert (work / "colors.txt").read_bytes() == b"red:\r\ngreen;\r\nblue)\r\n"


def test_fix_verify_shows_the_rewrite_as_a_program_and_reports_drafts(work, editing_dir):
    shown = fix("colors.txt", "Rename.", "--model", str(editing_dir), "--mode", "verify", "--show-program", "-q")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == '<program>\n<copy lines="1-1"/>\n<gen>\ngreen;\n</gen>\n<copy lines="3-3"/>\n</program>\n'
    as_json = fix("colors.txt", "Rename.", "--model", str(editing_dir), "--mode", "verify", "--json", "-q")
    data = json.loads(as_json.stdout)
    assert data["changed"] is True and data["program_as_written"] == AFTER
    assert data["statistics"]["drafts_proposed"] >= 1 and data["statistics"]["tokens_accepted"] >= 2


def test_fix_mode_check_stdin_and_budget(work, editing_dir):
    assert fix("colors.txt", "Rename.", "--model", str(editing_dir), "--mode", "verify", "--check", "-q").exit_code == 1
    piped = fix("-", "Rename.", "--model", str(editing_dir), "--mode", "rewrite", "-q", input=BEFORE.encode())
    assert piped.exit_code == 0 and piped.stdout == AFTER
    short = fix("colors.txt", "Rename.", "--model", str(editing_dir), "--mode", "verify", "--max-new-tokens", "2")
    assert short.exit_code == 1 and "budget of 2 new tokens" in short.stderr
    assert (work / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


@pytest.mark.parametrize("args", [["--mode", "fastest"], ["--mode", "verify", "--temperature", "0.5"]])
def test_fix_mode_usage_errors_exit_2(work, editing_dir, args):
    assert fix("colors.txt", "Rename.", "--model", str(editing_dir), *args).exit_code == 2


@pytest.mark.parametrize(("before", "new_display", "after"), [
    ("\ufeffimport os\n", '"""Doc."""\nimport os\n', '\ufeff"""Doc."""\nimport os\n'),
    ("\ufeffa\r\nb\r\n", "b\na\n", "\ufeffb\r\na\r\n"),
    ("x = 1\ny = 2", "x = 1\ny = 2\nz = 3\n", "x = 1\ny = 2\nz = 3\n"),
])
def test_rewrite_modes_keep_one_bom_at_the_start_and_append_after_a_last_line(before, new_display, after):
    document = Document.from_text(before)
    assert resolve(R.program_for(document, new_display), document) == after
