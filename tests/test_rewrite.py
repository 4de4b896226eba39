"""The whole-file rewrite modes (rewrite, lookup, verify): the fence prompt, parsing the answer back
into the file's own newlines (CRLF, BOM, no final newline), and the three modes end to end through
pipeline.edit_file on a tiny Qwen2 whose weights are set to write one known edit (a bigram model:
layers silenced, so the next token depends on the current one only). The fence and its stopping
rule on their own are in test_fence.py."""

from __future__ import annotations

import json
import random

import pytest
import torch

import cadedit.decode.pipeline as pipeline
from cadedit.text.document import Document
from cadedit.errors import BudgetError, ModelError
from cadedit.backends.model import LoadedModel
from cadedit.options import EditOptions, Mode, Sampling
from cadedit.decode.pipeline import edit_file, prepare
from cadedit.text.program import Copy, Gen, Program
from cadedit.prompt.messages import REWRITE_SYSTEM, fenced_source, language_tag, rewrite_messages
from cadedit.text.oracle import oracle
from cadedit.text.resolve import resolve, to_document_program
from cadedit.settings import MIN_ANSWER_TOKENS
from cadedit.backends.vocab import vocab_from_tokenizer
from tests.test_verify import fenced_run
from tests.tinymodel import make_model, save_native
from tests.tinytok import make_tokenizer

TOK = make_tokenizer()
TOKEN_BYTES = vocab_from_tokenizer(TOK).tokens
BEFORE = "red:\nteal;\nblue)\n"
AFTER = "red:\ngreen;\nblue)\n"  # each of its tokens is always followed by the same token: a bigram can write it
MODES = (Mode.REWRITE, Mode.LOOKUP, Mode.VERIFY)


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


def options(mode: Mode, **kwargs) -> EditOptions:
    return EditOptions(mode=mode, **kwargs)


def editing_model(document: Document, text: str = AFTER) -> LoadedModel:
    """The bigram model that answers the rewrite prompt of `document` with `text`."""
    prepared = prepare(loaded_from(make_model(0)), document, "Rename teal to green.", options(Mode.REWRITE))
    return loaded_from(bigram_model(prepared.prompt_ids[-1], text))


# -- the prompt and the answer (pure parts) ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_prompt_shows_the_file_in_a_fence_and_opens_the_answer_with_one(mode):
    document = Document.from_text("x = 1\ny = 2", "src/calc.py")
    prepared = prepare(loaded_from(make_model(0)), document, "Set y to 3.", options(mode))
    prompt = TOK.decode(list(prepared.prompt_ids))
    assert (
        "<|im_start|>user\nFile calc.py (2 lines):\n```python\nx = 1\ny = 2\n```\n\nInstruction: Set y to 3.\n"
        "Reply with the complete file, all 2 lines, with the instruction applied."
    ) in prompt
    assert prompt.count("Set y to 3.") == 1  # the default layout: the instruction after the file only
    assert prompt.startswith("<|im_start|>system\n" + REWRITE_SYSTEM)
    assert prompt.endswith("<|im_start|>assistant\n```python\n")
    assert prepared.mode is mode and prepared.fence == "```" and prepared.source == "x = 1\ny = 2\n```\n"


def test_layout_both_states_the_instruction_before_the_file_too():
    document = Document.from_text("x = 1\ny = 2", "src/calc.py")
    prepared = prepare(loaded_from(make_model(0)), document, "Set y to 3.", options(Mode.VERIFY, layout="both"))
    prompt = TOK.decode(list(prepared.prompt_ids))
    assert (
        "Instruction: Set y to 3.\n\nFile calc.py (2 lines):\n```python\nx = 1\ny = 2\n```\n\nInstruction: Set y to 3.\n"
        in prompt
    )
    assert prompt.endswith("<|im_start|>assistant\n```python\n")


def test_the_rewrite_prompt_parts():
    document = Document.from_text("s = '```'\n", "<stdin>")
    assert language_tag("a/b.PY") == "python" and language_tag("<stdin>") == "" and language_tag("x.unknown") == ""
    assert fenced_source(document, "````") == "s = '```'\n````\n"
    assert fenced_source(Document.from_text("a\r\nb"), "```") == "a\nb\n```\n"  # display form, a final newline
    assert fenced_source(Document.from_text(""), "```") == "```\n"
    system, user = rewrite_messages(document, " Fix it. ", "````")
    assert system == {"role": "system", "content": REWRITE_SYSTEM}
    assert user["role"] == "user" and user["content"].startswith(
        "Instruction: Fix it.\n\nFile the file (1 lines):\n````\n"
    )


def test_program_and_rewrite_prompts_differ_and_program_has_no_fence():
    document = Document.from_text("x = 1\n", "a.py")
    loaded = loaded_from(make_model(0))
    program = prepare(loaded, document, "Fix.", options(Mode.PROGRAM))
    rewrite = prepare(loaded, document, "Fix.", options(Mode.REWRITE))
    assert program.fence == program.source == "" and program.mode is Mode.PROGRAM
    assert "<copy lines=" in TOK.decode(list(program.prompt_ids)) and program.prompt_ids != rewrite.prompt_ids
    # the budget: twice the answer's tokens + 256, at least MIN_ANSWER_TOKENS, unless given
    assert rewrite.budget == max(2 * rewrite.file_tokens + 256, MIN_ANSWER_TOKENS) == MIN_ANSWER_TOKENS
    assert prepare(loaded, document, "Fix.", options(Mode.VERIFY, max_new_tokens=7)).budget == 7


def program_for(document: Document, new_display: str) -> Program:
    """What pipeline.answer_program makes of an answer's display text once it is cut at the fence:
    the oracle's alignment of the file with it, in the file's own newlines."""
    before = Document.from_text(document.display_text(1, document.n_lines) if document.lines else "")
    return to_document_program(oracle(before, Document.from_text(new_display)), document)


def answer_program_for(document: Document, new_display: str) -> Program:
    """pipeline.answer_program of a fenced answer that says `new_display` (then the closing fence)."""
    fence = "```"
    prepared = pipeline.Prepared(Mode.REWRITE, (), 0, 0, fence, fenced_source(document, fence))
    answer = new_display + ("\n" if new_display and not new_display.endswith("\n") else "") + fence + "\n"
    return pipeline.answer_program(document, prepared, pipeline.Decoded(answer, (), pipeline.DecodeStats()))


@pytest.mark.parametrize(
    ("before", "new_display", "after"),
    [
        ("a = 1\r\nb = 2\r\nc = 3\r\n", "a = 1\nb = 20\nc = 3\n", "a = 1\r\nb = 20\r\nc = 3\r\n"),
        ("\ufeffimport os\nx = 1\n", "import sys\nx = 1\n", "\ufeffimport sys\nx = 1\n"),
        ("\ufeffimport os\nx = 1\n", "import os\nx = 2\n", "\ufeffimport os\nx = 2\n"),
        ("x = 1\ny = 2", "x = 1\ny = 3", "x = 1\ny = 3"),
        ("a\rb\r", "a\nc\n", "a\rc\r"),
        ("a\r\nb\nc\r\n", "a\nB\nc\n", "a\r\nB\r\nc\r\n"),  # kept lines keep their own ending
        ("a\n\tb  \n", "a\n\tb  \nc\n", "a\n\tb  \nc\n"),
        ("", "new\n", "new\n"),
    ],
)
def test_the_rewrite_as_a_program_keeps_the_files_own_newlines(before, new_display, after):
    """answer_program: the fenced answer aligned with the file by the oracle (kept lines are copies)."""
    document = Document.from_text(before)
    program = answer_program_for(document, new_display)
    assert resolve(program, document) == after
    assert program == program_for(document, new_display)
    kept = sum(op.end - op.start + 1 for op in program.ops if isinstance(op, Copy))
    assert kept == sum(1 for a, b in zip(document.display_lines(), new_display.splitlines()) if a == b)


@pytest.mark.parametrize("mode", MODES)
def test_a_file_too_large_for_the_context_is_refused_before_any_model_work(mode):
    document = Document.from_text("x = 1\n" * 400, "big.py")
    with pytest.raises(ModelError, match="too large") as info:
        prepare(loaded_from(make_model(0), context=512), document, "Fix it.", options(mode))
    assert "400 lines" in info.value.message and "--mode program" in info.value.hint


# -- the modes on a model that writes a known edit ---------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_writes_the_models_edit(mode):
    document = Document.from_text(BEFORE, "colors.txt")
    result = edit_file(document, "Rename teal to green.", options(mode), loaded=editing_model(document))
    assert result.mode is mode and result.new_text == AFTER and result.program_text == AFTER
    assert result.program == Program((Copy(1, 1), Gen("green;\n"), Copy(3, 3)))
    assert resolve(result.program, document) == result.new_text
    assert result.changed and result.stats.tokens_new >= len(TOK.encode(AFTER))
    assert 1 <= result.stats.forward_passes <= len(TOK.encode(AFTER)) + 1


def run_mode(document: Document, loaded: LoadedModel, mode: Mode, **kwargs):
    """prepare + run_decode as edit_file does, keeping the decoded ids."""
    prepared = prepare(loaded, document, "Rename.", options(mode, **kwargs))
    return pipeline.run_decode(loaded, document, prepared, pipeline.sampler_for(Sampling()))


def test_verify_and_lookup_write_the_rewrites_ids_in_fewer_forwards():
    document = Document.from_text(BEFORE, "colors.txt")
    loaded = editing_model(document)
    rewrite = run_mode(document, loaded, Mode.REWRITE)
    verify = run_mode(document, loaded, Mode.VERIFY)
    lookup = run_mode(document, loaded, Mode.LOOKUP)
    assert verify.ids == rewrite.ids == lookup.ids
    assert rewrite.ids == (*TOK.encode(AFTER), TOK.eos_token_id) and rewrite.text == AFTER  # the EOS ends it
    assert rewrite.stats.forward_passes == len(rewrite.ids) and rewrite.stats.tokens_drafted == 0
    assert verify.stats.drafts_kept >= 2 and verify.stats.forward_passes < rewrite.stats.forward_passes
    assert verify.stats.tokens_drafted >= 1
    assert lookup.stats.tokens_drafted >= 1  # the prompt holds the file: its n-grams are drafted
    assert verify.stats.tokens_sampled == rewrite.stats.tokens_sampled == len(rewrite.ids)


def test_a_second_decode_of_the_same_prompt_reuses_its_cache():
    """The loaded model's one CachedLM keeps the prompt's KV cache: the next mode (the same
    rewrite prompt) feeds only the prompt's last token, and writes the same ids."""
    document = Document.from_text(BEFORE, "colors.txt")
    loaded = editing_model(document)
    first = run_mode(document, loaded, Mode.REWRITE)
    second = run_mode(document, loaded, Mode.VERIFY)
    assert first.stats.tokens_reused == 0 and first.stats.tokens_prompt > 1
    assert second.stats.tokens_reused == first.stats.tokens_prompt - 1 and second.stats.tokens_prompt == 1
    assert second.ids == first.ids


@pytest.mark.parametrize("mode", MODES)
def test_progress_sees_each_forward(mode):
    document = Document.from_text(BEFORE, "colors.txt")
    seen = []
    result = edit_file(
        document,
        "Rename.",
        options(mode),
        loaded=editing_model(document),
        on_step=lambda stats, step: seen.append((stats.forward_passes, step.phase)),
    )
    assert [n for n, _ in seen] == list(range(1, result.stats.forward_passes + 1))
    assert seen[0][1] == "prefill" and all(phase == "step" for _, phase in seen[1:])


def test_crlf_bom_and_no_final_newline_survive_every_mode():
    document = Document.from_text("\ufeffred:\r\nteal;\r\nblue)", "colors.txt")
    loaded = editing_model(document)
    for mode in MODES:
        result = edit_file(document, "Rename teal to green.", options(mode), loaded=loaded)
        assert result.new_text == "\ufeffred:\r\ngreen;\r\nblue)", mode


@pytest.mark.parametrize("mode", MODES)
def test_running_out_of_budget_writes_nothing(mode):
    document = Document.from_text(BEFORE, "colors.txt")
    with pytest.raises(BudgetError, match="budget of 3 new tokens"):
        edit_file(document, "Rename.", options(mode, max_new_tokens=3), loaded=editing_model(document))


def test_lookup_returns_exactly_the_rewrites_ids():
    """Prompt lookup drafts from the prompt and keeps only what the greedy rewrite would write."""
    model = make_model(1).double()
    loaded = loaded_from(model, torch.float64)
    rng = random.Random(1)
    document = Document.from_text("".join(rng.choice(["x = 1\n", "def f():\n", "    return 2\n"]) for _ in range(6)))
    prepared = prepare(loaded, document, "Fix it.", options(Mode.REWRITE, max_new_tokens=40))
    rewrite, lookup = fenced_run(loaded, prepared, Mode.REWRITE), fenced_run(loaded, prepared, Mode.LOOKUP)
    assert lookup.ids == rewrite.ids and len(lookup.ids) == 41 and not lookup.finished  # never closes the fence
    assert lookup.stats.tokens_drafted >= 1
    assert isinstance(TOK.decode(list(lookup.ids)), str)


def test_an_unknown_mode_is_refused():
    document = Document.from_text(BEFORE)
    with pytest.raises(ModelError, match="unknown mode"):
        edit_file(document, "x", EditOptions(mode="fastest"), loaded=editing_model(document))


# -- `cadedit fix --mode ...` --------------------------------------------------------------------


@pytest.fixture(scope="module")
def editing_dir(tmp_path_factory):
    """The bigram model that rewrites teal to green, saved as a model folder for --model."""
    folder = tmp_path_factory.mktemp("models") / "teal-to-green"
    save_native(editing_model(Document.from_text(BEFORE, "colors.txt")).model, folder)
    TOK.save_pretrained(str(folder))
    return folder


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "colors.txt").write_bytes(b"red:\r\nteal;\r\nblue)\r\n")
    return tmp_path


def fix(*args: str, input: bytes | None = None):
    from typer.testing import CliRunner

    from cadedit.cli import root as cli

    return CliRunner().invoke(cli.app, ["fix", *args], input=input)


@pytest.mark.parametrize("mode", [m.value for m in MODES])
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
    assert data["changed"] is True and data["program_as_written"] == AFTER and data["mode"] == "verify"
    stats = data["statistics"]
    assert stats["tokens_drafted"] >= 1 and stats["drafts_kept"] >= 2 and stats["tokens_copied"] == stats["drafts_kept"]
    assert stats["forward_passes"] < stats["tokens_sampled"]


def test_fix_defaults_to_verify(work, editing_dir):
    as_json = fix("colors.txt", "Rename.", "--model", str(editing_dir), "--json", "-q")
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["mode"] == "verify" and data["statistics"]["drafts_kept"] >= 2


def test_fix_verify_samples_with_a_temperature_and_keeps_drafts(work, editing_dir):
    """Sampling goes through the same loop as greedy: a drafted token is accepted with the model's
    probability of it (the bigram model is sure of each token at this temperature)."""
    as_json = fix(
        "colors.txt",
        "Rename.",
        "--model",
        str(editing_dir),
        "--mode",
        "verify",
        "--temperature",
        "0.3",
        "--seed",
        "1",
        "--json",
        "-q",
    )
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["program_as_written"] == AFTER and data["statistics"]["drafts_kept"] >= 2


def test_fix_mode_check_stdin_and_budget(work, editing_dir):
    assert fix("colors.txt", "Rename.", "--model", str(editing_dir), "--mode", "verify", "--check", "-q").exit_code == 1
    # piped text of no known language is named, as black and ruff take it (unnamed, it is not rewritten whole)
    piped = fix(
        "-",
        "Rename.",
        "--model",
        str(editing_dir),
        "--mode",
        "rewrite",
        "-q",
        "--stdin-filename",
        "colors.txt",
        input=BEFORE.encode(),
    )
    assert piped.exit_code == 0 and piped.stdout == AFTER
    short = fix("colors.txt", "Rename.", "--model", str(editing_dir), "--mode", "verify", "--max-new-tokens", "2")
    assert short.exit_code == 3 and "budget of 2 new tokens" in short.stderr  # no try passed (--tries)
    assert (work / "colors.txt").read_bytes() == b"red:\r\nteal;\r\nblue)\r\n"


@pytest.mark.parametrize("args", [["--mode", "fastest"], ["--mode", ""]])
def test_fix_mode_usage_errors_exit_2(work, editing_dir, args):
    assert fix("colors.txt", "Rename.", "--model", str(editing_dir), *args).exit_code == 2


@pytest.mark.parametrize(
    ("before", "new_display", "after"),
    [
        ("\ufeffimport os\n", '"""Doc."""\nimport os\n', '\ufeff"""Doc."""\nimport os\n'),
        ("\ufeffa\r\nb\r\n", "b\na\n", "\ufeffb\r\na\r\n"),
        ("x = 1\ny = 2", "x = 1\ny = 2\nz = 3\n", "x = 1\ny = 2\nz = 3\n"),
    ],
)
def test_rewrite_modes_keep_one_bom_at_the_start_and_append_after_a_last_line(before, new_display, after):
    document = Document.from_text(before)
    assert resolve(program_for(document, new_display), document) == after
