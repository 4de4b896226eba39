"""`cadedit fix` end to end with the tiny random Qwen2 saved as a model folder (--model DIR).

The model's choices are scripted through the real decode loop (real model, real cursor): in the
default verify mode it 'retypes' the known edit in its fence, in program mode it spells the edit's
oracle program (real grammar, real splices), so exit codes and outputs are exact; one subprocess
test runs the real console script with the unscripted random model.
"""

from __future__ import annotations

import json

import pytest

import cadedit.decode.pipeline as pipeline
from cadedit.text.document import Document
from cadedit.options import Mode
from cadedit.text.program import parse
from cadedit.text.resolve import resolve
from cadedit.decode.loop import script_sampler
from tests.scripting import editing, every_try, inject_picks, invoke, spelling
from tests.tinymodel import save_model

BEFORE = b"def add(a, b):\r\n    return a - b\r\n\r\n\r\nprint(add(1, 2))\r\n"
AFTER = b"def add(a, b):\r\n    return a + b\r\n\r\n\r\nprint(add(1, 2))\r\n"


@pytest.fixture(scope="session")
def small_context_dir(tmp_path_factory):
    return save_model(tmp_path_factory.mktemp("models") / "tiny-512", context=512)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_bytes(BEFORE)
    return tmp_path


@pytest.fixture
def scripted(monkeypatch):
    """Make the model 'choose' the edit that turns the file into `after`, in whatever mode it runs
    (tests/scripting.py: the picks seam of tries.edit_verified); the modes of the decodes made are
    in the returned list."""
    modes = []

    def script(after: bytes) -> list:
        answer = editing(lambda document: Document.from_bytes(after), lambda prepared: modes.append(prepared.mode))
        inject_picks(monkeypatch, every_try(answer))
        return modes

    return script


def fix(*args: str, input: bytes | None = None):
    """The default mode (verify), the whole file retyped ("Fix add." names the function add)."""
    return invoke(["fix", "--no-scope", *args], input=input)


def test_fix_prints_the_diff_and_leaves_the_file_alone(work, tiny_dir, scripted):
    modes = scripted(AFTER)
    result = fix("a.py", "Fix add.", "--model", str(tiny_dir))
    assert result.exit_code == 0, result.output
    assert modes == [Mode.VERIFY]
    assert result.stdout_bytes.startswith(b"diff --git a/a.py b/a.py\n")
    assert b"-    return a - b\r\n+    return a + b\r\n" in result.stdout_bytes
    assert (work / "a.py").read_bytes() == BEFORE
    assert "tokens copied" in result.stderr and "+1 -1 lines" in result.stderr


def test_write_applies_the_edit_atomically_byte_for_byte(work, tiny_dir, scripted):
    scripted(AFTER)
    result = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--write")
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == b""
    assert (work / "a.py").read_bytes() == AFTER
    assert [p.name for p in work.iterdir()] == ["a.py"]  # no temporary file left


@pytest.mark.parametrize("after, code", [(AFTER, 1), (BEFORE, 0)])
def test_check_exits_1_only_when_the_file_would_change(work, tiny_dir, scripted, after, code):
    scripted(after)
    result = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--check", "--quiet")
    assert result.exit_code == code, result.output
    assert (work / "a.py").read_bytes() == BEFORE
    assert result.stderr == ""


def test_stdin_prints_the_edited_file(work, tiny_dir, scripted):
    scripted(AFTER)
    result = fix("-", "Fix add.", "--model", str(tiny_dir), "-q", input=BEFORE)
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == AFTER


def test_json_has_program_diff_and_statistics(work, tiny_dir, scripted):
    scripted(AFTER)
    result = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--json", "-q")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout_bytes)
    before = Document.from_bytes(BEFORE)
    assert resolve(parse(data["program"]), before).encode() == AFTER
    assert data["diff"].startswith("diff --git a/a.py b/a.py") and data["changed"] is True and data["mode"] == "verify"
    stats = data["statistics"]
    assert stats["drafts_kept"] > 0 and stats["tokens_copied"] == stats["drafts_kept"]
    assert stats["forward_passes"] < stats["tokens_sampled"] and stats["tokens_spliced"] == 0
    assert {"seconds_prefill", "seconds_steps", "seconds_forced", "seconds_splices"} <= set(stats)


def test_json_of_program_mode_counts_copies_and_splices(work, tiny_dir, scripted):
    modes = scripted(AFTER)
    result = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--json", "-q", "--mode", "program")
    assert result.exit_code == 0, result.output
    assert modes == [Mode.PROGRAM]
    data = json.loads(result.stdout_bytes)
    assert resolve(parse(data["program"]), Document.from_bytes(BEFORE)).encode() == AFTER
    assert data["mode"] == "program" and data["program_as_written"].startswith("<program>\n")
    stats = data["statistics"]
    assert stats["copies"] == 2 and stats["tokens_spliced"] > 0 and stats["forward_passes"] <= stats["tokens_sampled"]
    assert {"seconds_prefill", "seconds_steps", "seconds_forced", "seconds_splices"} <= set(stats)


def test_show_program_prints_a_program_that_apply_accepts(work, tiny_dir, scripted):
    scripted(AFTER)
    result = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--show-program", "-q")
    assert result.exit_code == 0, result.output
    (work / "p").write_bytes(result.stdout_bytes)
    applied = invoke(["apply", "a.py", "p", "--write"])
    assert applied.exit_code == 0, applied.output
    assert (work / "a.py").read_bytes() == AFTER


def test_model_from_environment(work, tiny_dir, scripted, monkeypatch):
    scripted(AFTER)
    monkeypatch.setenv("CADEDIT_MODEL", str(tiny_dir))
    assert fix("a.py", "Fix add.", "-q").exit_code == 0


@pytest.mark.parametrize("model", ["no/such/folder", "missing.gguf", "Org/uncached-model"])
def test_bad_model_is_one_line_error_exit_1(work, model):
    result = fix("a.py", "Fix add.", "--model", model)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert "hint:" in result.stderr and "CADEDIT_MODEL" in result.stderr
    assert (work / "a.py").read_bytes() == BEFORE


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda w: None, "no such file"),
        (lambda w: (w / "b.py").mkdir(), "is a directory"),
        (lambda w: (w / "b.py").write_bytes(b"\x00\x01"), "binary file"),
        (lambda w: (w / "b.py").write_bytes(b"caf\xe9\n"), "not UTF-8"),
    ],
)
def test_unreadable_file_is_one_line_error_exit_1(work, tiny_dir, make, message):
    make(work)
    result = fix("b.py", "Fix.", "--model", str(tiny_dir))
    assert result.exit_code == 1 and message in result.stderr and "Traceback" not in result.stderr


def test_write_with_stdin_and_check_with_write_are_usage_errors(work, tiny_dir):
    assert fix("-", "Fix.", "--write", input=BEFORE).exit_code == 2
    assert fix("a.py", "Fix.", "--write", "--check").exit_code == 2


@pytest.mark.parametrize("mode", ["verify", "program"])
def test_file_too_large_for_the_context_is_refused_before_any_model_work(work, small_context_dir, monkeypatch, mode):
    def no_decode(loaded, document, prepared):
        pytest.fail("the model ran")

    inject_picks(monkeypatch, every_try(no_decode))  # each decode starts with its sampler
    (work / "big.py").write_text("".join(f"value_{k} = {k} * {k}\n" for k in range(200)))
    result = fix("big.py", "Fix.", "--model", str(small_context_dir), "--mode", mode)
    assert result.exit_code == 1, result.output
    assert "200 lines" in result.stderr and "context limit is 512 tokens" in result.stderr


def test_budget_exhausted_writes_nothing(work, tiny_dir, scripted):
    scripted(b"completely\nnew\ncontent\nthat\nneeds\nmany\ntokens\n")
    result = fix("a.py", "Fix.", "--model", str(tiny_dir), "--write", "--max-new-tokens", "8")
    assert result.exit_code == 3  # every try ran out of budget: no try passed (the lost --max-new-tokens hint
    assert "budget of 8 new tokens" in result.stderr  # is test_tries_cli's xfail)
    assert (work / "a.py").read_bytes() == BEFORE


def test_console_script_with_the_unscripted_random_model(work, tiny_dir, run_cli):
    """The real console script and the real random model: it either edits or runs out of budget,
    and in both cases the answer is a clean exit code and the file is untouched."""
    proc = run_cli(
        "fix",
        "a.py",
        "Fix add.",
        "--model",
        str(tiny_dir),
        "--max-new-tokens",
        "40",
        "--threads",
        "1",
        "--tries",
        "1",
        cwd=work,
    )
    assert proc.returncode in (0, 3), proc.stderr  # 3: the try failed its checks (here: out of budget)
    assert b"Traceback" not in proc.stderr
    if proc.returncode == 3:
        assert b"budget of 40 new tokens" in proc.stderr
    assert (work / "a.py").read_bytes() == BEFORE


def test_json_and_verbose_say_when_the_first_forward_ran_after_the_process_started(work, tiny_dir, run_cli):
    import time

    start = time.monotonic()
    proc = run_cli(
        "fix",
        "a.py",
        "Fix add.",
        "--model",
        str(tiny_dir),
        "--max-new-tokens",
        "40",
        "--threads",
        "1",
        "--tries",
        "1",
        "--allow-no-change",
        "--json",
        "--verbose",
        cwd=work,
    )
    wall = time.monotonic() - start
    assert proc.returncode in (0, 3), proc.stderr
    data = json.loads(proc.stdout)
    assert 0 < data["load_phases"]["process start to load"] < data["seconds_to_first_forward"] < wall
    assert {"tokenizer", "weights"} <= data["load_phases"].keys()
    assert b"first forward " in proc.stderr and b" s after the process started" in proc.stderr


def test_write_refuses_a_read_only_file(work, tiny_dir, scripted):
    import os

    scripted(AFTER)
    os.chmod(work / "a.py", 0o444)
    result = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--write", "--quiet")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "error: a.py: read-only (mode 0444); nothing written"
    assert (work / "a.py").read_bytes() == BEFORE


def test_several_files_are_written_all_or_none_when_one_is_read_only(work, tiny_dir, scripted):
    import os

    scripted(AFTER)
    (work / "ro").mkdir()
    (work / "ro/b.py").write_bytes(BEFORE)
    os.chmod(work / "ro/b.py", 0o444)
    result = fix("a.py", "ro/b.py", "-i", "Fix add.", "--model", str(tiny_dir), "--write", "--quiet")
    assert result.exit_code == 1
    assert "error: ro/b.py: read-only (mode 0444); nothing written" in result.stderr
    assert (work / "a.py").read_bytes() == BEFORE and (work / "ro/b.py").read_bytes() == BEFORE


def test_several_files_roll_back_when_a_later_write_fails(work, tiny_dir, scripted, monkeypatch):
    import os

    scripted(AFTER)
    (work / "b.py").write_bytes(BEFORE)
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith("b.py") and b"a + b" in open(src, "rb").read():  # b.py's edit fails (disk full ...)
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    result = fix("a.py", "b.py", "-i", "Fix add.", "--model", str(tiny_dir), "--write", "--quiet")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: b.py: cannot write (No space left on device)",
        "hint: no file was changed",
    ]
    assert (work / "a.py").read_bytes() == BEFORE and (work / "b.py").read_bytes() == BEFORE
    assert sorted(p.name for p in work.iterdir()) == ["a.py", "b.py"]


def script_display_program(monkeypatch, text: str) -> None:
    """Make the model write exactly this display-form program (what a model sees and writes)."""

    def spell(loaded, document, prepared):
        return script_sampler(text, pipeline.grammar_for(loaded).vocab.tokens)

    inject_picks(monkeypatch, every_try(spell))


@pytest.mark.parametrize(
    ("before", "program", "after"),
    [
        (
            b"\xef\xbb\xbfimport os\n",
            '<program>\n<gen>\n"""Doc."""\n</gen>\n<copy lines="1-1"/>\n</program>\n',
            b'\xef\xbb\xbf"""Doc."""\nimport os\n',
        ),
        (
            b"x = 1\ny = 2",
            '<program>\n<copy lines="1-2"/>\n<gen>\nz = 3\n</gen>\n</program>\n',
            b"x = 1\ny = 2\nz = 3\n",
        ),
    ],
    ids=["bom, gen above line 1", "gen after an unterminated last line"],
)
def test_the_models_program_is_resolved_as_the_model_meant_it(work, tiny_dir, monkeypatch, before, program, after):
    (work / "a.py").write_bytes(before)
    script_display_program(monkeypatch, program)
    result = fix("a.py", "Edit.", "--model", str(tiny_dir), "--write", "--quiet", "--mode", "program")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == after


def test_a_long_instruction_is_an_instruction_not_a_file_name_error(work, tiny_dir, scripted):
    scripted(AFTER)
    instruction = "Fix the subtraction in add so that it adds; " * 10  # over 255 bytes: no file could have this name
    result = fix("a.py", instruction, "--model", str(tiny_dir), "--quiet")
    assert result.exit_code == 0, result.output
    assert b"+    return a + b\r\n" in result.stdout_bytes


def test_debug_after_fix_is_accepted(work):
    result = invoke(["fix", "nope.py", "Fix it.", "--debug"])
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "error: nope.py: no such file" in result.stderr


def test_a_file_name_that_is_not_utf8_is_a_one_line_error(work):
    import os

    name = os.fsdecode(b"\xff.py")
    (work / name).write_bytes(BEFORE)
    result = fix(name, "Fix add.")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        "error: \ufffd.py: the file name is not UTF-8; the model's prompt must name the file"
    )


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda d: [(d / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")],
            "has no tokenizer files (tokenizer.json, tokenizer_config.json ...)",
        ),
        (
            lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:1000]),
            "model.safetensors (ValueError: header longer than the file)",
        ),
    ],
    ids=["no tokenizer files", "truncated safetensors"],
)
def test_a_damaged_model_folder_is_a_one_line_error(work, tiny_dir, tmp_path, damage, message):
    import shutil

    folder = tmp_path / "damaged"
    shutil.copytree(tiny_dir, folder)
    damage(folder)
    result = fix("a.py", "Fix add.", "--model", str(folder))
    assert result.exit_code == 1
    assert message in result.stderr.splitlines()[0] and "internal error" not in result.stderr
    assert result.stderr.splitlines()[1].startswith("hint: ")


def test_stdin_is_read_up_to_the_cap_only(work, monkeypatch):
    import cadedit.text.document

    monkeypatch.setattr(cadedit.text.document, "MAX_BYTES", 16)
    result = fix("-", "Fix add.", input=b"x = 1\n" * 10)
    assert result.exit_code == 1
    assert result.stderr == "error: <stdin>: larger than 16 bytes; cadedit edits source files\n"


def test_a_hub_id_loads_from_the_local_cache_and_one_not_there_is_a_one_line_error(
    work, tiny_dir, tmp_path, monkeypatch, scripted
):
    """Offline (as every test is), a hub id is the snapshot already in the Hugging Face cache."""
    import shutil

    cache = tmp_path / "hub"
    snapshot = cache / "models--someone--tiny-coder" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_dir, snapshot)
    (cache / "models--someone--tiny-coder" / "refs").mkdir()
    (cache / "models--someone--tiny-coder" / "refs" / "main").write_text("0" * 40)
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # read once, when huggingface_hub was imported
    scripted(AFTER)
    result = fix("a.py", "Fix add.", "--model", "someone/tiny-coder", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["changed"] is True
    result = fix("a.py", "Fix add.", "--model", "someone/not-there")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[0].startswith(
        "error: cannot load model someone/not-there: not in the local Hugging Face cache"
    )
    assert (work / "a.py").read_bytes() == BEFORE


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (
            "{{ raise_exception('System role not supported') }}",
            "chat_template.jinja: the chat template refused the prompt (System role not supported)",
        ),
        (b"\xff\xfe not utf-8", "chat_template.jinja: cannot read the chat template"),
        ("{% for %}", "chat_template.jinja: the chat template does not compile"),
        ("{% include 'x.j2' %}", "chat_template.jinja: the chat template uses {% include %}, which would load another"),
        ("{% import 'm.j2' as m %}{{ m.x }}", "chat_template.jinja: the chat template uses {% import %}"),
        ("{% from 'm.j2' import x %}", "chat_template.jinja: the chat template uses {% from ... import %}"),
        ("{% extends 'base.j2' %}", "chat_template.jinja: the chat template uses {% extends %}"),
    ],
    ids=["raises", "not utf-8", "does not compile", "include", "import", "from-import", "extends"],
)
def test_a_chat_template_that_fails_is_a_one_line_error(work, tiny_dir, tmp_path, template, message):
    import shutil

    folder = tmp_path / "odd-template"
    shutil.copytree(tiny_dir, folder)
    target = folder / "chat_template.jinja"
    target.write_bytes(template if isinstance(template, bytes) else template.encode())
    result = fix("a.py", "Fix add.", "--model", str(folder))
    assert result.exit_code == 1 and "Traceback" not in result.stderr and "internal error" not in result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert message in error
    assert (work / "a.py").read_bytes() == BEFORE


def test_a_small_file_may_grow_far_past_its_size(work, tiny_dir, scripted):
    # A stub implemented: the answer is many times the file. Budgets scaled by the file alone
    # (twice it, plus 256) ended such answers before their closing fence.
    from tests.tinytok import make_tokenizer

    before = b"def table():\n    pass\n"
    rows = "".join(f"    row{i} = {i} * {i}\n" for i in range(30))
    after = ("def table():\n" + rows + "    return [" + ", ".join(f"row{i}" for i in range(30)) + "]\n").encode()
    tokens = make_tokenizer().encode
    assert 2 * len(tokens(before.decode())) + 256 < len(tokens(after.decode())) < 1000
    (work / "stub.py").write_bytes(before)
    scripted(after)
    result = fix("stub.py", "Implement table.", "--model", str(tiny_dir), "--write")
    assert result.exit_code == 0, result.output
    assert (work / "stub.py").read_bytes() == after


def test_an_answer_that_closes_its_fence_right_after_the_code_keeps_the_files_blank_lines(work, tiny_dir, monkeypatch):
    """The model closes its fence after the last line of code whatever followed it: the file's own
    blank lines at its end are not an edit, neither in the diff nor in the file written."""
    (work / "a.py").write_bytes(b"def add(a, b):\n    return a - b\n\n\n")
    inject_picks(
        monkeypatch, every_try(spelling(lambda prepared: "def add(a, b):\n    return a + b\n" + prepared.fence + "\n"))
    )
    shown = fix("a.py", "Fix add.", "--model", str(tiny_dir))
    assert shown.exit_code == 0, shown.output
    assert b"-    return a - b\n+    return a + b\n" in shown.stdout_bytes and b"\n-\n" not in shown.stdout_bytes
    written = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--write")
    assert written.exit_code == 0, written.output
    assert (work / "a.py").read_bytes() == b"def add(a, b):\n    return a + b\n\n\n"


def test_first_run_says_what_it_makes_and_later_runs_do_not(work, tiny_dir, scripted):
    """The once-only work speaks while it runs (a first run sat silent for minutes at "loading"): here
    the compact step weights, made once and cached, so the next run has nothing to say; --quiet says
    nothing either."""
    scripted(AFTER)
    first = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--dtype", "bf16-int8")
    assert first.exit_code == 0, first.output
    assert "making the compact one-token step weights into " in first.stderr
    again = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--dtype", "bf16-int8")
    assert again.exit_code == 0 and "making" not in again.stderr


def test_quiet_first_run_makes_them_silently(work, tiny_dir, scripted):
    scripted(AFTER)
    result = fix("a.py", "Fix add.", "--model", str(tiny_dir), "--dtype", "bf16-int8", "--quiet")
    assert result.exit_code == 0 and "making" not in result.stderr
