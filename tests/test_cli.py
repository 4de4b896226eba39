"""The cadedit CLI through typer's CliRunner and through the real console script: data on stdout,
one-line errors on stderr with exit 1 and no file touched, usage errors exit 2, Ctrl-C 130, the
done-when pipe through patch(1) and git apply, and no torch import for commands without a model."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cadedit import __version__
from cadedit.cli import root as cli
from cadedit.text.program import Copy, Gen, Program, format

needs_patch = pytest.mark.skipif(shutil.which("patch") is None, reason="patch(1) not installed")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")

BEFORE = b"def f(a, b):\r\n    return a - b\r\n\r\nprint(f(1, 2))"
AFTER = b"def f(a, b):\r\n    return a + b\r\n\r\nprint(f(1, 2))\r\n# done"


def invoke(*args: str, input: bytes | None = None):
    return CliRunner().invoke(cli.app, list(args), input=input)


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A working directory with a.py (before), b.py (after) and p (the oracle program)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_bytes(BEFORE)
    (tmp_path / "b.py").write_bytes(AFTER)
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_oracle_prints_the_program(work):
    result = invoke("oracle", "a.py", "b.py")
    assert result.exit_code == 0, result.output
    expected = Program((Copy(1, 1), Gen("    return a + b\r\n"), Copy(3, 3), Gen("print(f(1, 2))\r\n# done")))
    assert result.stdout_bytes == format(expected).encode()  # .stdout would turn CRLF into LF
    assert result.stderr == ""


def test_apply_prints_a_diff_and_writes_nothing(work):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    result = invoke("apply", "a.py", "p")
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes.startswith(b"diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ ")
    assert b"-    return a - b\r\n+    return a + b\r\n" in result.stdout_bytes
    assert (work / "a.py").read_bytes() == BEFORE


def test_apply_write_replaces_the_file_exactly(work):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    (work / "a.py").chmod(0o640)
    result = invoke("apply", "a.py", "p", "--write")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "wrote a.py (+3 -2)" in result.stderr
    assert (work / "a.py").read_bytes() == AFTER
    assert (work / "a.py").stat().st_mode & 0o777 == 0o640


def test_apply_reads_the_program_from_stdin(work):
    program = invoke("oracle", "a.py", "b.py").stdout_bytes
    result = invoke("apply", "a.py", "-", "-w", input=program)
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == AFTER


def test_apply_with_no_change_says_so_and_exits_0(work):
    (work / "p").write_text(format(Program((Copy(1, 4),))))
    result = invoke("apply", "a.py", "p", "--write")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "no change" in result.stderr
    assert (work / "a.py").read_bytes() == BEFORE


def test_clip_mode_warns_and_applies(work):
    (work / "p").write_text(format(Program((Copy(1, 2), Gen("    return 0\n"), Copy(4, 9)))))
    result = invoke("apply", "a.py", "p", "--clip", "--write")
    assert result.exit_code == 0, result.output
    assert (
        'warning: program op 3: `<copy lines="4-9"/>` but the file has 4 lines; clipped to <copy lines="4-4"/>'
        in result.stderr
    )
    assert (work / "a.py").read_bytes() == b"def f(a, b):\r\n    return a - b\r\n    return 0\nprint(f(1, 2))"


# Every bad input: one line on stderr (plus an optional hint), exit 1, nothing on stdout, no file changed.
BAD_INPUTS = [
    ("missing file", ["apply", "nope.py", "p"], "error: nope.py: no such file"),
    ("missing program", ["apply", "a.py", "nope.program"], "error: nope.program: no such file"),
    ("directory", ["apply", "sub", "p"], "error: sub: is a directory, not a file"),
    (
        "binary file",
        ["apply", "bin.dat", "p"],
        "error: bin.dat: binary file (NUL byte at offset 3); cadedit edits text files only",
    ),
    (
        "non-UTF-8 file",
        ["apply", "latin1.py", "p"],
        "error: latin1.py: not UTF-8 (invalid byte 0xe9 at line 2, offset 9)",
    ),
    (
        "non-UTF-8 program",
        ["apply", "a.py", "latin1.py"],
        "error: latin1.py: not UTF-8 (invalid byte 0xe9 at line 2, offset 9)",
    ),
    (
        "bad program text",
        ["apply", "a.py", "bad.program"],
        "error: op 2 (line 3): expected '<copy', '<gen>' or '</program>', found '<cpy lines=\"3-4\"/>\\n</program>\\n'",
    ),
    (
        "out-of-range copy",
        ["apply", "a.py", "far.program"],
        'error: program op 1: `<copy lines="3-9"/>` but the file has 4 lines',
    ),
    (
        "reversed copy",
        ["apply", "a.py", "reversed.program"],
        'error: program op 1: `<copy lines="3-2"/>` starts after it ends',
    ),
    ("missing oracle input", ["oracle", "a.py", "gone.py"], "error: gone.py: no such file"),
    (
        "binary oracle input",
        ["oracle", "bin.dat", "a.py"],
        "error: bin.dat: binary file (NUL byte at offset 3); cadedit edits text files only",
    ),
]


def make_bad_inputs(root: Path) -> None:
    (root / "sub").mkdir()
    (root / "bin.dat").write_bytes(b"abc\x00def\n")
    (root / "latin1.py").write_bytes(b"x = 1\ns='\xe9'\n")
    (root / "p").write_text(format(Program((Copy(1, 1),))))
    (root / "bad.program").write_text('<program>\n<copy lines="1-2"/>\n<cpy lines="3-4"/>\n</program>\n')
    (root / "far.program").write_text('<program>\n<copy lines="3-9"/>\n</program>\n')
    (root / "reversed.program").write_text('<program>\n<copy lines="3-2"/>\n</program>\n')


@pytest.mark.parametrize("write", [False, True], ids=["diff", "write"])
@pytest.mark.parametrize(("what", "args", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_line_exit_1_and_touches_nothing(work, what, args, message, write):
    make_bad_inputs(work)
    before = snapshot(work)
    result = invoke(*args, *(["--write"] if write and args[0] == "apply" else []))
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == message
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: "))
    assert "Traceback" not in result.output
    assert snapshot(work) == before


def test_strict_mode_hints_at_clip(work):
    make_bad_inputs(work)
    result = invoke("apply", "a.py", "far.program")
    assert result.stderr.splitlines()[1] == "hint: fix the line numbers, or pass --clip to clip them to the file"


def test_write_refuses_a_file_changed_while_cadedit_worked(work, monkeypatch):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    import cadedit.text.resolve as resolve

    real = resolve.resolve_ops

    def edit_meanwhile(*args, **kwargs):
        (work / "a.py").write_bytes(b"someone else's edit\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(resolve, "resolve_ops", edit_meanwhile)
    result = invoke("apply", "a.py", "p", "--write")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "error: a.py: changed on disk after cadedit read it; nothing written"
    assert (work / "a.py").read_bytes() == b"someone else's edit\n"
    assert sorted(p.name for p in work.iterdir()) == ["a.py", "b.py", "p"]


@pytest.mark.parametrize(
    "args",
    [["apply", "a.py"], ["apply"], ["oracle", "a.py"], ["apply", "a.py", "p", "--bogus"], ["frobnicate"]],
)
def test_usage_errors_exit_2(work, args):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Usage:" in result.stderr


def test_version():
    result = invoke("--version")
    assert (result.exit_code, result.stdout) == (0, f"cadedit {__version__}\n")


@pytest.mark.parametrize("command", ["oracle", "apply"])
def test_every_command_has_help_with_an_example(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert "Example: cadedit" in result.stdout


def _crash(*args, **kwargs):
    raise RuntimeError("boom")


def test_internal_error_is_one_line_without_debug(work, monkeypatch):
    monkeypatch.setattr("cadedit.text.oracle.oracle", _crash)
    result = invoke("oracle", "a.py", "b.py")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: internal error: RuntimeError: boom",
        "hint: rerun with --debug for the traceback",
    ]


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(work, monkeypatch, how):
    monkeypatch.setattr("cadedit.text.oracle.oracle", _crash)
    if how == "env":
        monkeypatch.setenv("CADEDIT_DEBUG", "1")
    result = invoke(*(["--debug"] if how == "flag" else []), "oracle", "a.py", "b.py")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "_crash" in result.stderr
    assert result.stderr.rstrip().splitlines()[-2] == "error: internal error: RuntimeError: boom"


def test_debug_shows_the_traceback_of_a_cadedit_error(work):
    result = invoke("--debug", "apply", "nope.py", "p")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "error: nope.py: no such file" in result.stderr


def test_ctrl_c_exits_130(work, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("cadedit.text.oracle.oracle", interrupted)
    assert invoke("oracle", "a.py", "b.py").exit_code == 130


# --- the real console script -----------------------------------------------------------------


def sh(command: str, cwd: Path) -> subprocess.CompletedProcess:
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"]}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, timeout=60)


PAIRS = {
    "crlf_no_final_newline": (BEFORE, AFTER),
    "lf": (b"import os\n\n\ndef g():\n\treturn 1  \n", b"import os\nimport sys\n\n\ndef g():\n\treturn 2  \n"),
    "gen_with_reserved_literals": (b"x = 1\n", b'x = "</gen><copy lines=\\"1-1\\"/></program>"\nx = 1\n'),
    "to_empty": (b"a\nb\n", b""),
}


@needs_patch
@pytest.mark.parametrize("path", ["a.py", "pkg/sub dir/a.py"])
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_done_when_pipe_through_patch(tmp_path, pair, path):
    before, after = PAIRS[pair]
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_bytes(before)
    (tmp_path / "b.py").write_bytes(after)
    done = sh(f"cadedit oracle '{path}' b.py > p && cadedit apply '{path}' p | patch -p1", tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / path).read_bytes() == after


@needs_git
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_git_apply_in_a_repository(tmp_path, pair):
    before, after = PAIRS[pair]
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_bytes(before)
    (tmp_path / "new.py").write_bytes(after)
    setup = "git init -q . && git add src/m.py && git commit -qm init"
    done = sh(
        f"{setup} && cadedit oracle src/m.py new.py > p && cadedit apply src/m.py p | git apply --check - "
        f"&& cadedit apply src/m.py p > d && git apply d",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "src" / "m.py").read_bytes() == after


def test_console_script_errors_exit_1_with_one_line(run_cli, tmp_path):
    done = run_cli("apply", "missing.py", "p", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == b""
    assert done.stderr.decode() == "error: missing.py: no such file\n"


def test_a_reader_that_stops_early_ends_cadedit_quietly(tmp_path):
    (tmp_path / "a.py").write_text("".join(f"line {k}\n" for k in range(100_000)))
    (tmp_path / "p").write_text(format(Program((Gen("x\n" * 100_000),))))
    done = sh("set -o pipefail; cadedit apply a.py p 2>err | (sleep 0.5; head -c 10 >/dev/null)", tmp_path)
    assert done.returncode == 1  # the diff did not all get out: not a success
    assert (tmp_path / "err").read_bytes() == b""


def test_console_script_usage_error_exits_2(run_cli, tmp_path):
    assert run_cli("apply", cwd=tmp_path).returncode == 2


def test_python_dash_m_runs_the_cli(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cadedit", "--version"], capture_output=True, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"cadedit {__version__}\n".encode())


def test_python_dash_m_in_a_folder_with_files_named_like_the_standard_library(tmp_path):
    """`python -m cadedit fix logging.py` where the user's logging.py (or json.py) sits: Python puts
    the working folder first on the import path for -m; cadedit must import the standard library's."""
    for name in ("logging", "json", "difflib", "typing", "tempfile"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the user\\'s own {name}.py was imported')\n")
    (tmp_path / "a.py").write_bytes(BEFORE)
    (tmp_path / "b.py").write_bytes(AFTER)
    done = subprocess.run(
        [sys.executable, "-m", "cadedit", "oracle", "a.py", "b.py"], capture_output=True, cwd=tmp_path, text=True
    )
    assert done.returncode == 0 and "own" not in done.stderr, done.stderr
    assert "copy" in done.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "cadedit", "fix", "logging.py", "Fix it.", "--model", str(tmp_path / "no-model")],
        capture_output=True,
        cwd=tmp_path,
        text=True,
    )
    assert missing.returncode == 1 and "own logging.py" not in missing.stderr, missing.stderr
    assert missing.stderr.count("error:") == 1 and "Traceback" not in missing.stderr


@pytest.mark.parametrize(
    "args", [["oracle", "a.py", "b.py"], ["apply", "a.py", "p"], ["apply", "--help"], ["--version"]]
)
def test_commands_without_a_model_never_import_torch(tmp_path, args):
    (tmp_path / "a.py").write_bytes(BEFORE)
    (tmp_path / "b.py").write_bytes(AFTER)
    (tmp_path / "p").write_text(format(Program((Copy(1, 2),))))
    probe = (
        "import sys\nfrom cadedit.cli.root import main\nsys.argv = ['cadedit', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'accelerate', 'gguf'})\n"
        "sys.stderr.write(f'HEAVY={heavy}')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, cwd=tmp_path, timeout=60)
    assert done.stderr.decode().endswith("HEAVY=[]"), done.stderr.decode()


def test_startup_imports_no_model_code(tmp_path):
    """`cadedit --version` (and every command that needs no model) starts without importing torch,
    numpy, transformers or the tokenizer: those take seconds; start-up time itself is a benchmark
    (`cadedit bench overhead`), not a timed test."""
    import sys

    code = (
        "import sys\nfrom cadedit.entry import main\nsys.argv = ['cadedit', '--version']\ntry:\n    main()\n"
        "except SystemExit:\n    pass\nheavy = ('torch', 'numpy', 'transformers', 'tokenizers', 'jinja2', 'safetensors')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


@pytest.mark.parametrize("args", [["--help"], ["bench", "--help"]])
def test_help_lists_every_command_without_importing_one(args):
    """`cadedit --help` and `cadedit bench --help` list every command from the registries in cli/root.py
    and bench/cli.py: no command's own module is imported, nor numpy or torch."""
    code = (
        "import sys\nfrom cadedit.entry import main\nsys.argv = ['cadedit', *sys.argv[1:]]\ntry:\n    main()\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m in ('numpy', 'torch') or m.startswith('cadedit.')\n"
        "             and m not in ('cadedit.cli.root', 'cadedit.cli.common', 'cadedit.bench.cli', 'cadedit.entry')\n"
        "             and m.rpartition('.')[0] in ('cadedit.cli', 'cadedit.bench')))"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
    listed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("│ ") and line[2] not in " -"]
    from cadedit.bench import cli as bench_cli

    assert listed == list((bench_cli if args[0] == "bench" else cli).COMMANDS)


def test_the_registries_give_each_commands_own_first_paragraph():
    """The line `--help` lists for a command, written in cli/root.py or bench/cli.py, is the first paragraph
    of the command's own help: the registry cannot drift from the command it names."""
    import importlib
    import inspect

    from cadedit.bench import cli as bench_cli
    from cadedit.cli.common import command_of

    for registry in (cli.COMMANDS, bench_cli.COMMANDS):
        for name, lazy in registry.items():
            command = command_of(getattr(importlib.import_module(lazy.module), lazy.attribute), name)
            assert inspect.cleandoc(command.help).split("\n\n")[0] == lazy.help, name
            assert command.name == name


# --- the repository's promises ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def test_example_program_is_the_oracle_of_the_example_pair():
    result = invoke("oracle", str(ROOT / "examples/before.py"), str(ROOT / "examples/after.py"))
    assert result.exit_code == 0
    assert result.stdout_bytes == (ROOT / "examples/fix.program").read_bytes()


def test_ci_runs_exactly_the_readme_test_command():
    command = ".venv/bin/python -m pytest"
    assert f"```sh\n{command}\n```" in (ROOT / "README.md").read_text()
    assert f"\n{command} || status=$?\n" in (ROOT / ".ci/run").read_text()


# ------------------------------------------------------------------ special files are never read or replaced


def run_module(*args: str, cwd: Path, timeout: float = 30, **kwargs) -> subprocess.CompletedProcess:
    """`python -m cadedit` of this worktree in a subprocess (a hang fails the test instead of the run)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run(
        [sys.executable, "-m", "cadedit", *args], cwd=cwd, capture_output=True, timeout=timeout, env=env, **kwargs
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_write_never_replaces_a_character_device(work):
    os.mknod(work / "mynull", 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    (work / "p").write_text(format(Program((Gen("x\n"),))))
    result = invoke("apply", "mynull", "p", "--write")
    assert result.exit_code == 1
    assert (
        result.stderr.splitlines()[0]
        == "error: mynull: is a character device; cadedit reads and writes regular files only"
    )
    assert stat.S_ISCHR(os.lstat(work / "mynull").st_mode)


@pytest.mark.parametrize(
    "args", [["apply", "fifo", "p"], ["apply", "a.py", "fifo"], ["oracle", "fifo", "a.py"], ["fix", "fifo", "Fix it."]]
)
def test_a_fifo_is_refused_at_once_instead_of_hanging(work, args):
    os.mkfifo(work / "fifo")
    (work / "p").write_text(format(Program((Copy(1, 1),))))
    done = run_module(*args, cwd=work, timeout=20)
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "error: fifo: is a FIFO (named pipe); cadedit reads and writes regular files only\n"
        "hint: to edit piped text, use `cadedit fix - ...` with the text on stdin\n"
    )


def test_dev_zero_is_refused_without_reading_it(work):
    import resource

    (work / "p").write_text(format(Program((Copy(1, 1),))))
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # noqa: E731 - unbounded read dies
    done = run_module("apply", "/dev/zero", "p", cwd=work, timeout=30, preexec_fn=limit)
    assert done.returncode == 1
    assert done.stderr.decode().startswith("error: /dev/zero: is a character device;")


def test_a_file_over_the_size_cap_is_refused(work, monkeypatch):
    import cadedit.text.document

    monkeypatch.setattr(cadedit.text.document, "MAX_BYTES", 10)
    (work / "p").write_text(format(Program((Copy(1, 1),))))
    result = invoke("apply", "a.py", "p")
    assert result.exit_code == 1
    assert result.stderr == "error: a.py: larger than 10 bytes; cadedit edits source files\n"


# ------------------------------------------------------------------------------------ --write and modes


def test_write_refuses_a_read_only_file_unless_forced(work):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    os.chmod(work / "a.py", 0o444)
    refused = invoke("apply", "a.py", "p", "--write")
    assert refused.exit_code == 1
    assert refused.stderr.splitlines() == [
        "error: a.py: read-only (mode 0444); nothing written",
        "hint: make it writable first (chmod u+w a.py), or pass --force where offered",
    ]
    assert (work / "a.py").read_bytes() == BEFORE
    forced = invoke("apply", "a.py", "p", "--write", "--force")
    assert forced.exit_code == 0, forced.output
    assert (work / "a.py").read_bytes() == AFTER and stat.S_IMODE(os.stat(work / "a.py").st_mode) == 0o444


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o6775, 0o1644])
def test_write_keeps_setuid_setgid_and_sticky_bits(work, mode):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    os.chmod(work / "a.py", mode)
    result = invoke("apply", "a.py", "p", "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == AFTER
    assert stat.S_IMODE(os.stat(work / "a.py").st_mode) == mode


def test_write_keeps_extended_attributes_acls_included(work):
    """A POSIX ACL is an xattr (system.posix_acl_access): apply --write replaces the file by rename and
    copies every xattr the filesystem lets it, so who may read the file does not change."""
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    try:
        os.setxattr(work / "a.py", "user.cadedit-test", b"kept")
    except OSError:
        pytest.skip("no user xattrs on this filesystem")
    result = invoke("apply", "a.py", "p", "--write")
    assert result.exit_code == 0, result.output
    assert (work / "a.py").read_bytes() == AFTER and os.getxattr(work / "a.py", "user.cadedit-test") == b"kept"


# ---------------------------------------------------------------- BOM and an unterminated last line

BOM_FILE = b'\xef\xbb\xbfimport os\n'
BOM_DOC = b'\xef\xbb\xbf"""Doc."""\nimport os\n'


def test_a_gen_above_line_1_keeps_the_bom_at_the_start_only(work):
    (work / "m.py").write_bytes(BOM_FILE)
    (work / "p").write_text(format(Program((Gen('"""Doc."""\n'), Copy(1, 1)))))
    assert invoke("apply", "m.py", "p", "--write").exit_code == 0
    assert (work / "m.py").read_bytes() == BOM_DOC


def test_oracle_and_apply_agree_on_a_bom_file_edited_above_line_1(work):
    (work / "m.py").write_bytes(BOM_FILE)
    (work / "n.py").write_bytes(BOM_DOC)
    program = invoke("oracle", "m.py", "n.py").stdout_bytes
    assert program == format(Program((Gen('"""Doc."""\n'), Copy(1, 1)))).encode()  # line 1 is still copied
    (work / "p").write_bytes(program)
    shown = invoke("apply", "m.py", "p")
    assert shown.stdout_bytes.endswith(b'@@ -1 +1,2 @@\n-\xef\xbb\xbfimport os\n+\xef\xbb\xbf"""Doc."""\n+import os\n')
    assert invoke("apply", "m.py", "p", "--write").exit_code == 0
    assert (work / "m.py").read_bytes() == BOM_DOC


def test_a_gen_after_an_unterminated_last_line_starts_a_new_line(work):
    (work / "m.py").write_bytes(b"x = 1\ny = 2")
    (work / "p").write_text('<program>\n<copy lines="1-2"/><gen>\nz = 3\n</gen>\n</program>\n')
    assert invoke("apply", "m.py", "p", "--write").exit_code == 0
    assert (work / "m.py").read_bytes() == b"x = 1\ny = 2\nz = 3\n"


def test_a_program_with_crlf_line_ends_is_refused_where_its_first_gen_starts(work):
    (work / "p").write_bytes(b'<program>\r\n<copy lines="1-1"/>\r\n<gen>\r\nx = 1\r\n</gen>\r\n</program>\r\n')
    result = invoke("apply", "a.py", "p")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: op 2 (line 3): expected '\\n' after '<gen>' (the program has CR line ends), found "
        "'\\r\\nx = 1\\r\\n</gen>\\r\\n</program>\\r\\n'",
        "hint: write programs with \\n line ends (dos2unix converts one); CRs inside gen text are kept",
    ]


@needs_patch
@pytest.mark.parametrize("env", [{"FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1"}, {"FORCE_COLOR": "1", "TERM": "xterm"}])
def test_a_piped_diff_is_the_plain_patch_whatever_the_colour_settings(work, env):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    plain = run_module("apply", "a.py", "p", cwd=work).stdout
    done = subprocess.run(
        [sys.executable, "-m", "cadedit", "apply", "a.py", "p"],
        cwd=work,
        capture_output=True,
        env={**os.environ, **env, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert done.returncode == 0 and done.stdout == plain
    assert b"\x1b[" not in done.stdout and b"^M" not in done.stdout
    patched = subprocess.run(["patch", "-p1"], cwd=work, input=done.stdout, capture_output=True)
    assert patched.returncode == 0, patched.stdout
    assert (work / "a.py").read_bytes() == AFTER


@pytest.mark.parametrize(
    "args",
    [
        ["oracle", "a.py", "b.py", "--debug"],
        ["oracle", "--debug", "a.py", "b.py"],
        ["hook", "run", "--debug"],
        ["hook", "--debug", "run"],
    ],
)
def test_debug_is_accepted_after_the_command_too(work, monkeypatch, args):
    monkeypatch.setattr("cadedit.text.oracle.oracle", _crash)
    monkeypatch.setattr("cadedit.git.repo.open_repo", _crash)
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert "Traceback" in result.stderr and "error: internal error: RuntimeError: boom" in result.stderr


# ------------------------------------------------------------------------ one-line errors, not crashes


def test_a_file_name_that_is_not_utf8_gets_a_quoted_header_that_patch_applies(work):
    name = os.fsdecode(b"\xff.py")
    (work / name).write_bytes(BEFORE)
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    result = invoke("apply", name, "p")
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes.startswith(b'diff --git "a/\\377.py" "b/\\377.py"\n--- "a/\\377.py"\n+++ "b/\\377.py"\n')
    if shutil.which("patch"):
        assert (
            subprocess.run(["patch", "-p1"], cwd=work, input=result.stdout_bytes, capture_output=True).returncode == 0
        )
        assert (work / name).read_bytes() == AFTER


def test_a_line_number_of_thousands_of_digits_is_a_program_error(work):
    (work / "p").write_text(f'<program>\n<copy lines="1-{"9" * 5000}"/>\n</program>\n')
    result = invoke("apply", "a.py", "p", "--clip")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: op 1 (line 2): expected line numbers of at most 18 digits, found ")


@pytest.mark.parametrize("redirect", ["closed", "/dev/full"])
def test_stdout_closed_or_full_is_a_one_line_error(work, redirect):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    for args in (["apply", "a.py", "p"], ["oracle", "a.py", "b.py"]):
        if redirect == "closed":
            done = subprocess.run(
                [sys.executable, "-m", "cadedit", *args],
                cwd=work,
                stderr=subprocess.PIPE,
                timeout=30,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
                preexec_fn=lambda: os.close(1),
            )
            expected = "error: standard output is closed; nothing written\nhint: redirect it to a file or a pipe\n"
        else:
            with open("/dev/full", "wb") as full:
                done = subprocess.run(
                    [sys.executable, "-m", "cadedit", *args],
                    cwd=work,
                    stdout=full,
                    stderr=subprocess.PIPE,
                    timeout=30,
                    env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
                )
            expected = "error: cannot write to standard output (No space left on device)\n"
        assert done.returncode == 1 and done.stderr.decode() == expected, args


@pytest.fixture
def unreadable(work, monkeypatch):
    """secret.py behaves as a mode-000 file does for a user who is not root (root reads anything)."""
    (work / "secret.py").write_bytes(BEFORE)
    os.chmod(work / "secret.py", 0)
    real_access, real_open = os.access, os.open
    denied = lambda path: os.path.basename(os.fspath(path)) == "secret.py"  # noqa: E731

    def access(path, mode, *args, **kwargs):
        return False if denied(path) and mode & os.R_OK else real_access(path, mode, *args, **kwargs)

    def open_(path, *args, **kwargs):
        if denied(path):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "open", open_)
    return work


@pytest.mark.parametrize(
    "args",
    [
        ["apply", "secret.py", "p"],
        ["oracle", "secret.py", "a.py"],
        ["oracle", "a.py", "secret.py"],
        ["fix", "secret.py", "Fix it."],
    ],
)
def test_an_unreadable_file_is_a_one_line_error_exit_1_everywhere(unreadable, args):
    (unreadable / "p").write_text(format(Program((Copy(1, 1),))))
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [
        "error: secret.py: permission denied",
        "hint: check the permissions of the file and its folders",
    ]


def test_a_folder_without_search_permission_is_a_one_line_error(work, monkeypatch):
    """stat() of a file in a folder without x permission fails with EACCES (root is never refused)."""
    (work / "locked").mkdir()
    (work / "locked/f.py").write_bytes(BEFORE)
    real_stat = os.stat

    def stat_(path, *args, **kwargs):
        if "locked" in os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_)
    result = invoke("oracle", "locked/f.py", "a.py")
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[0] == "error: locked/f.py: permission denied"


def test_a_symlink_loop_and_a_broken_symlink_say_so(work):
    os.symlink("loop2", work / "loop1")
    os.symlink("loop1", work / "loop2")
    os.symlink("nowhere", work / "broken")
    assert (
        invoke("oracle", "loop1", "a.py").stderr == "error: loop1: symlink loop (too many levels of symbolic links)\n"
    )
    assert invoke("oracle", "broken", "a.py").stderr == "error: broken: broken symlink (its target does not exist)\n"


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"\xff\xfeh\x00i\x00\n\x00", "UTF-16"),
        (b"\xfe\xff\x00h\x00i", "UTF-16"),
        (b"\xff\xfe\x00\x00h\x00\x00\x00", "UTF-32"),
        (b"h\x00i\x00\n\x00", "UTF-16"),
    ],
)
def test_utf16_and_utf32_files_are_named_as_such(work, data, kind):
    (work / "wide.txt").write_bytes(data)
    result = invoke("oracle", "wide.txt", "a.py")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: wide.txt: {kind} text; cadedit edits UTF-8 files only",
        f"hint: convert it first, e.g. iconv -f {kind} -t UTF-8",
    ]


# ------------------------------------------------------------------------------- signals during --write

SIGNAL_SCRIPT = """
import os, signal, sys
import cadedit.text.diff
when, name = sys.argv[1], sys.argv[2]
real = getattr(os, when)
def hooked(*args):
    result = None if when == "fsync" else real(*args)
    os.kill(os.getpid(), getattr(signal, name))
    return real(*args) if when == "fsync" else result
setattr(os, when, hooked)
from cadedit.cli.root import main
sys.argv = ["cadedit", "apply", "a.py", "p", "--write"]
main()
"""


@pytest.mark.parametrize(("name", "code"), [("SIGTERM", 143), ("SIGINT", 130), ("SIGHUP", 129)])
def test_a_signal_before_the_rename_leaves_the_file_and_no_temporary_file(work, name, code):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    for _ in range(5):  # it failed 4 runs in 5
        done = run_module_script(SIGNAL_SCRIPT, "fsync", name, cwd=work)
        assert done.returncode == code, done.stderr
        assert sorted(p.name for p in work.iterdir()) == ["a.py", "b.py", "p"]
        assert (work / "a.py").read_bytes() == BEFORE


def test_a_signal_right_after_the_rename_does_not_report_a_written_file_as_interrupted(work):
    (work / "p").write_bytes(invoke("oracle", "a.py", "b.py").stdout_bytes)
    done = run_module_script(SIGNAL_SCRIPT, "replace", "SIGINT", cwd=work)
    assert done.returncode == 0, done.stderr
    assert (work / "a.py").read_bytes() == AFTER
    assert done.stderr.decode().startswith("wrote a.py")


def run_module_script(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, capture_output=True, timeout=30, env=env)


@pytest.mark.parametrize("args", [["apply", "../other/f.py", "p"], ["fix", "../other/f.py", "Fix it."]])
def test_a_diff_for_a_file_outside_the_working_directory_is_refused_in_one_line(tmp_path, monkeypatch, args):
    (tmp_path / "here").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other/f.py").write_bytes(BEFORE)
    (tmp_path / "here/p").write_text(format(Program((Copy(1, 1),))))
    monkeypatch.chdir(tmp_path / "here")
    result = invoke(*args)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: ../other/f.py: outside the working directory, so a diff cannot name it for patch -p1",
        "hint: run cadedit from a folder that contains the file, or write the edit with --write",
    ]
    (tmp_path / "here/p").write_bytes(format(Program((Copy(1, 2),))).encode())
    assert invoke("apply", "../other/f.py", "p", "--write").exit_code == 0  # --write needs no header


def test_a_pipe_with_write_is_refused_as_a_pipe(work):
    (work / "p").write_text(format(Program((Copy(1, 1),))))
    read, write = os.pipe()
    os.write(write, BEFORE)
    os.close(write)
    try:
        done = run_module("apply", f"/dev/fd/{read}", "p", "--write", cwd=work, pass_fds=(read,))
    finally:
        os.close(read)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines()[0] == (
        f"error: /dev/fd/{read}: is a FIFO (named pipe); cadedit reads and writes regular files only"
    )


def test_a_program_on_stdin_is_read_up_to_the_cap_only(work, monkeypatch):
    import cadedit.text.document

    monkeypatch.setattr(cadedit.text.document, "MAX_BYTES", 64)
    result = invoke("apply", "a.py", "-", input=b"<program>\n" + b" " * 100 + b"</program>\n")
    assert result.exit_code == 1
    assert result.stderr == "error: <stdin>: larger than 64 bytes; cadedit edits source files\n"
