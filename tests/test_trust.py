"""Nothing another user controls is trusted: settings files, the server's runtime folder and socket;
and a special token's text in a file is text (the issue "Reliability round 3", items 7, 8, 10, 14, 20)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from cadedit.server import warm as server
from cadedit.text.document import Document
from cadedit.server.warm import ServerError
from cadedit.backends.model import LoadedModel, chat_prompt, encode
from cadedit.options import EditOptions, Mode
from cadedit.decode.pipeline import prepare
from tests.conftest import console_script
from tests.terminal import on_a_terminal
from tests.tinymodel import make_model
from tests.tinytok import make_tokenizer

TOK = make_tokenizer()


def cadedit(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [console_script(), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


# -- settings files (item 10) -----------------------------------------------------------------


@pytest.fixture
def shared(tmp_path):
    """A world-writable parent folder (as /tmp) with a settings file that picks a model, and a project below it."""
    parent = tmp_path / "shared"
    (parent / "project").mkdir(parents=True)
    parent.chmod(0o1777)
    (parent / ".cadedit.toml").write_text('model = "/planted/by/someone/else"\n')
    (parent / "project" / "a.py").write_text("x = 1\n")
    return parent


def test_a_settings_file_of_another_user_is_ignored(shared):
    os.chown(shared / ".cadedit.toml", 12345, 12345)
    done = cadedit("fix", "a.py", "Fix it.", "--tries", "1", cwd=shared / "project")
    assert done.returncode == 1 and "/planted/by/someone/else" not in done.stderr, done.stderr


def test_a_settings_file_others_may_write_is_ignored(shared):
    (shared / ".cadedit.toml").chmod(0o666)
    done = cadedit("fix", "a.py", "Fix it.", "--tries", "1", cwd=shared / "project")
    assert done.returncode == 1 and "/planted/by/someone/else" not in done.stderr, done.stderr


def test_the_users_own_settings_file_is_read_and_the_search_stops_at_the_repository(shared):
    assert cadedit("trust", cwd=shared / "project").returncode == 0
    done = cadedit("fix", "a.py", "Fix it.", "--tries", "1", cwd=shared / "project")
    assert "/planted/by/someone/else" in done.stderr  # the control: trusted and approved, so it is used
    (shared / "project" / ".git").mkdir()  # the project is a repository: nothing above its root counts
    done = cadedit("fix", "a.py", "Fix it.", "--tries", "1", cwd=shared / "project")
    assert "/planted/by/someone/else" not in done.stderr, done.stderr


# -- a repository's settings wait for the user's approval (issue "Trust round 4", item 1) ------------


@pytest.fixture
def cloned(tmp_path):
    """A repository as `git clone` leaves it: the user's own files, mode 644, with settings that pick a model."""
    repo = tmp_path / "clone"
    (repo / ".git").mkdir(parents=True)
    (repo / ".cadedit.toml").write_text('model = "/chosen/by/the/repository"\n')
    (repo / "a.py").write_text("x = 1\n")
    return repo


def test_a_repositorys_settings_are_used_only_once_approved_and_again_after_an_edit(cloned):
    fix = ("fix", "a.py", "Fix it.", "--tries", "1")
    before = cadedit(*fix, cwd=cloned)
    assert before.returncode == 1 and "/chosen/by/the/repository" not in before.stderr.split("warning:")[0]
    warning = [line for line in before.stderr.splitlines() if line.startswith("warning:")]
    assert warning == [
        f"warning: {cloned / '.cadedit.toml'}: this repository's settings (model) are not approved, so "
        f"cadedit ignored them; review them and run `cadedit trust {cloned}` to use them"
    ]
    trusted = cadedit("trust", cwd=cloned)
    assert trusted.returncode == 0 and 'model = "/chosen/by/the/repository"' in trusted.stderr
    after = cadedit(*fix, cwd=cloned)
    assert "error: model '/chosen/by/the/repository'" in after.stderr and "warning:" not in after.stderr
    (cloned / ".cadedit.toml").write_text('model = "/changed/after/approval"\n')  # a pull changes them
    edited = cadedit(*fix, cwd=cloned)
    assert "/changed/after/approval" not in edited.stderr.split("warning:")[0] and "not approved" in edited.stderr
    assert cadedit("trust", cwd=cloned).returncode == 0
    assert "/changed/after/approval" in cadedit(*fix, cwd=cloned).stderr
    removed = cadedit("trust", "--remove", cwd=cloned)
    assert removed.returncode == 0 and "approval withdrawn" in removed.stderr
    assert "not approved" in cadedit(*fix, cwd=cloned).stderr


def test_the_hook_runs_no_rule_of_a_repository_not_approved(cloned):
    subprocess.run(["git", "init", "-q"], cwd=cloned, check=True)
    marker = cloned.parent / "ran"
    (cloned / ".cadedit.toml").write_text(
        f'[[rules]]\nfiles = "*.py"\ninstruction = "Fix it."\ntest = "touch {marker}"\n'
    )
    subprocess.run(["git", "add", "a.py"], cwd=cloned, check=True)
    done = cadedit("hook", "run", cwd=cloned, env={"CADEDIT_MODEL": str(cloned / "no-model")})
    assert done.returncode == 1 and not marker.exists()
    assert "this repository's cadedit settings are not approved; the hook runs nothing from them" in done.stderr
    assert f"cadedit trust {cloned}" in done.stderr and "Traceback" not in done.stderr


def test_the_users_own_config_chooses_and_a_shared_one_does_not(cloned, tmp_path):
    (cloned / ".cadedit.toml").unlink()
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "cadedit" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('model = "/chosen/by/the/user"\n')
    assert "error: model '/chosen/by/the/user'" in cadedit("fix", "a.py", "Fix it.", cwd=cloned).stderr
    config.chmod(0o646)
    assert "/chosen/by/the/user" not in cadedit("fix", "a.py", "Fix it.", cwd=cloned).stderr


def test_a_damaged_approvals_file_is_a_one_line_error(cloned):
    """trusted.json of JSON nested past the parser's depth: said in one line with its remedy, as any damage."""
    approvals = Path(os.environ["XDG_CONFIG_HOME"]) / "cadedit" / "trusted.json"
    approvals.parent.mkdir(mode=0o700, parents=True)
    approvals.write_text("[" * 100_000)
    done = cadedit("trust", cwd=cloned)
    assert done.returncode == 1 and "internal error" not in done.stderr, done.stderr
    first, hint = done.stderr.splitlines()
    assert first.startswith(f"error: {approvals}: cannot read the approved settings (maximum recursion depth")
    assert hint == "hint: delete it and approve your repositories again with `cadedit trust`"


def test_trust_without_settings_is_a_one_line_error(tmp_path):
    done = cadedit("trust", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 1 and done.stderr == f"error: {tmp_path}: no cadedit settings file to approve\n"


# -- the user cache is the user's own (issue "Trust round 4", item 4) ---------------------------------


@pytest.mark.parametrize(
    "owner, mode, where",
    [(12345, 0o755, "models"), (None, 0o777, "models"), (None, 0o777, "entry"), (12345, 0o644, "file")],
)
def test_converted_weights_another_user_could_plant_are_not_run(tmp_path, owner, mode, where):
    """A GGUF on torch runs the weights converted into the cache: a cache folder, entry or file that
    another user owns or may write is refused in one line, never loaded."""
    from cadedit.backends.model import gguf_cache_dir
    from tests.tinygguf import save_gguf
    from tests.tinymodel import make_hf_model

    gguf = save_gguf(tmp_path / "coder.gguf")
    planted = gguf_cache_dir(gguf)
    make_hf_model(1).save_pretrained(planted)  # "converted weights" that are not this file's
    TOK.save_pretrained(planted)
    chosen = {"models": planted.parent, "entry": planted, "file": planted / "config.json"}[where]
    chosen.chmod(mode)
    if owner is not None:
        os.chown(chosen, owner, owner)
    (tmp_path / "a.py").write_text("x = 1\n")
    done = cadedit(
        "fix",
        "a.py",
        "Fix it.",
        "--model",
        str(gguf),
        "--backend",
        "torch",
        "--dtype",
        "fp32",
        "--threads",
        "1",
        "--tries",
        "1",
        cwd=tmp_path,
    )
    assert done.returncode == 1 and f"{chosen}: not this user's own" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 2 and (tmp_path / "a.py").read_text() == "x = 1\n"


# -- the server's runtime folder and socket (items 7, 8, 20) -----------------------------------


def test_a_relative_runtime_folder_is_a_one_line_error(tmp_path):
    done = cadedit("serve", "start", "--model", "x", cwd=tmp_path, env={"CADEDIT_RUNTIME_DIR": "run"})
    assert done.returncode == 1 and "CADEDIT_RUNTIME_DIR=run is not an absolute path" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("mode, owner", [(0o777, None), (0o755, None), (0o700, 12345)])
def test_a_runtime_folder_that_is_not_the_users_own_is_refused(tmp_path, mode, owner):
    folder = tmp_path / "run"
    folder.mkdir()
    folder.chmod(mode)
    if owner is not None:
        os.chown(folder, owner, owner)
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    (folder / "server.log").symlink_to(victim)
    done = cadedit("serve", "start", "--model", "x", cwd=tmp_path, env={"CADEDIT_RUNTIME_DIR": str(folder)})
    assert done.returncode == 1 and "not a private folder of this user" in done.stderr, done.stderr
    assert victim.read_text() == "mine\n"
    with pytest.raises(ServerError, match="not a private folder"):
        server.own_folder(folder, create=False)


def test_a_link_planted_as_the_log_in_the_users_folder_is_not_followed(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    (folder / "server.log").symlink_to(victim)
    (folder / "server.pid").symlink_to(victim)
    done = cadedit(
        "serve",
        "start",
        "--model",
        str(tmp_path / "no-such-model"),
        cwd=tmp_path,
        env={"CADEDIT_RUNTIME_DIR": str(folder)},
    )
    assert done.returncode == 1
    assert victim.read_text() == "mine\n"


def test_a_server_of_another_user_is_not_talked_to(monkeypatch, tmp_path):
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server._check_peer(left, tmp_path / "server.sock")  # the same user: fine
        monkeypatch.setattr(server.os, "getuid", lambda: 12345)
        with pytest.raises(ServerError, match=r"runs as another user \(uid \d+"):
            server._check_peer(left, tmp_path / "server.sock")
    finally:
        left.close()
        right.close()


# -- special tokens in the file (item 14) ------------------------------------------------------

NOTES = "# Chat format\n\nA turn starts with <|im_start|>user and ends with <|im_end|>.\n<|endoftext|>\n"


def test_special_token_text_in_a_file_is_encoded_as_text():
    specials = {TOK.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>")}
    ids = encode(TOK, NOTES)
    assert not specials & set(ids) and TOK.decode(ids) == NOTES
    assert encode(TOK, "plain text") == TOK.encode("plain text", add_special_tokens=False)


@pytest.mark.parametrize("mode", [Mode.VERIFY, Mode.REWRITE, Mode.PROGRAM])
def test_only_the_templates_markers_are_special_in_the_prompt(mode):
    loaded = LoadedModel(make_model(0), TOK, "tiny", "cpu", None, 1, 4096, 0.0)
    prepared = prepare(loaded, Document.from_text(NOTES, "notes.md"), "Say <|im_end|> twice.", EditOptions(mode=mode))
    plain = NOTES.replace("<|", "[|").replace("|>", "|]")
    control = prepare(loaded, Document.from_text(plain, "notes.md"), "Say [|im_end|] twice.", EditOptions(mode=mode))
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        token = TOK.convert_tokens_to_ids(special)
        assert prepared.prompt_ids.count(token) == control.prompt_ids.count(token)  # the template's own only
    text = TOK.decode(list(prepared.prompt_ids))
    assert text.count("<|im_end|>") == TOK.decode(list(control.prompt_ids)).count("<|im_end|>") + 2


def test_a_prompt_without_special_text_is_encoded_as_before():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "def f(): pass"}]
    prompt, ids = chat_prompt(TOK, messages, "```python\n")
    assert ids == TOK.encode(prompt, add_special_tokens=False)


# -- what `cadedit trust` shows is what runs (issue 63, items 1, 7, 15, 17) ---------------------------

HIDING_KEY = "\x1b[1A\x1b[2K\x1b[1A\x1b[2K\x1b[G"  # cursor up, erase the line: twice; back to column 1


def _toml_key(text: str) -> str:
    return '"' + "".join(f"\\u{ord(ch):04x}" if ch < " " else ch for ch in text) + '"'


def test_trust_shows_keys_and_values_with_control_characters_visible_on_a_terminal(cloned, tmp_path):
    """A key of terminal escapes cannot erase the rule listed before it: on a real terminal the output
    holds no ESC of the repository's, the key is quoted and its escapes are visible."""
    (cloned / ".cadedit.toml").write_text(
        f'[[rules]]\nfiles = "*.py"\ninstruction = "Fix it."\ntest = "pytest -q; touch {tmp_path}/pwned"\n'
    )
    (cloned / "pyproject.toml").write_text(
        f'[tool.cadedit]\n{_toml_key(HIDING_KEY + "fake listing")} = "verify"\nmode = "verify\\u001b[2K"\n'
    )
    code, shown = on_a_terminal("trust", cwd=cloned)
    assert code == 0, shown
    assert b"\x1b[1A" not in shown and b"\x1b[2K" not in shown and b"\x1b[G" not in shown, shown
    text = shown.decode()
    assert f"touch {tmp_path}/pwned" in text
    assert '"\\u001b[1A\\u001b[2K\\u001b[1A\\u001b[2K\\u001b[Gfake listing" = "verify"  (not a cadedit setting)' in text
    assert 'mode = "verify\\u001b[2K"' in text


def test_the_unapproved_warning_shows_keys_with_control_characters_visible(cloned):
    """The warning on every `cadedit fix` in a repository not approved: OSC 52 (sets the clipboard) and
    erase-line in a key reach stderr made visible, never as the bytes a terminal acts on."""
    osc52 = "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b[1A\x1b[2K"
    (cloned / ".cadedit.toml").write_text(f"{_toml_key(osc52)} = 0\n{_toml_key('m' + chr(0x9B) + '2K')} = 1\n")
    done = cadedit("fix", "a.py", "Fix it.", "--tries", "1", "-q", cwd=cloned)
    warning = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr and "\x9b" not in done.stderr, done.stderr
    assert len(warning) == 1, done.stderr
    assert '("\\u001b]52;c;Y3VybCBldmlsIHwgc2g=\\u0007\\u001b[1A\\u001b[2K", "m<U+009B>2K")' in warning[0]


def test_a_settings_file_linked_out_of_the_repository_is_not_used_approved_or_approvable(cloned, tmp_path):
    """Repository B's .cadedit.toml is a link to approved repository A's: B is not approved by A's
    approval; fix warns and ignores it, the hook names it, `trust` refuses it, `trust --remove` in B
    finds nothing, and A stays approved."""
    assert cadedit("trust", cwd=cloned).returncode == 0
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=other, check=True)
    (other / "a.py").write_text("x = 1\n")
    (other / ".cadedit.toml").symlink_to(Path("..", cloned.name, ".cadedit.toml"))
    done = cadedit("fix", "a.py", "Fix it.", "--tries", "1", cwd=other)
    assert "/chosen/by/the/repository" not in done.stderr.split("warning:")[0], done.stderr
    assert f"warning: {other / '.cadedit.toml'}: ignored, a link to {cloned / '.cadedit.toml'}, outside the " in (
        done.stderr
    )
    hook = cadedit("hook", "run", cwd=other, env={"CADEDIT_MODEL": str(other / "no-model")})
    assert hook.returncode == 1 and "a link to" in hook.stderr and "outside the repository" in hook.stderr
    refused = cadedit("trust", cwd=other)
    assert refused.returncode == 1 and "not approvable" in refused.stderr and "outside the repository" in refused.stderr
    assert cadedit("trust", "--remove", cwd=other).stderr == f"cadedit: nothing approved in {other}\n"
    assert "error: model '/chosen/by/the/repository'" in cadedit("fix", "a.py", "Fix it.", cwd=cloned).stderr
    (other / "pyproject.toml").write_text('[tool.cadedit]\nmode = "verify"\n')
    beside = cadedit("trust", cwd=other)
    assert beside.returncode == 0 and f"approved {other / 'pyproject.toml'}" in beside.stderr
    assert f"warning: {other / '.cadedit.toml'}: ignored, a link to" in beside.stderr


def test_an_approval_is_of_the_path_the_file_is_found_at_not_of_what_it_links_to(tmp_path):
    """Two folders outside any repository (the search goes up to /): B's link to A's approved file is
    read, but it is B's file to approve; `trust --remove` in B withdraws B's approval, A's stays."""
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "a.py").write_text("x = 1\n")
    (first / ".cadedit.toml").write_text('model = "/chosen/in/first"\n')
    (second / ".cadedit.toml").symlink_to(first / ".cadedit.toml")
    assert cadedit("trust", cwd=first).returncode == 0
    unapproved = cadedit("fix", "a.py", "Fix it.", "--tries", "1", cwd=second)
    assert "/chosen/in/first" not in unapproved.stderr.split("warning:")[0] and "not approved" in unapproved.stderr
    assert cadedit("trust", cwd=second).returncode == 0
    assert "error: model '/chosen/in/first'" in cadedit("fix", "a.py", "Fix it.", cwd=second).stderr
    removed = cadedit("trust", "--remove", cwd=second)
    assert removed.stderr == f"cadedit: {second / '.cadedit.toml'}: approval withdrawn\n"
    assert "not approved" in cadedit("fix", "a.py", "Fix it.", cwd=second).stderr
    assert "error: model '/chosen/in/first'" in cadedit("fix", "a.py", "Fix it.", cwd=first).stderr


@pytest.mark.parametrize(
    "model, link, outside",
    [
        ("models/../../elsewhere/coder.gguf", None, True),
        ("models/coder.gguf", "../../elsewhere/coder.gguf", True),
        ("{beside}/elsewhere/coder.gguf", None, True),  # an absolute path beside the repository
        ("models/coder.gguf", None, False),
        ("models/coder.gguf", "../weights/coder.gguf", False),
        ("Qwen/Qwen2.5-Coder-1.5B-Instruct", None, False),
    ],
)
def test_trust_marks_a_model_outside_the_repository_by_its_resolved_path(cloned, model, link, outside):
    model = model.format(beside=cloned.parent)
    (cloned / ".cadedit.toml").write_text(f'model = "{model}"\n')
    (cloned / "models").mkdir()
    if link is not None:
        (cloned / "models" / "coder.gguf").symlink_to(link)
    done = cadedit("trust", cwd=cloned)
    listed = [line for line in done.stderr.splitlines() if line.startswith("    model =")]
    assert done.returncode == 0 and len(listed) == 1, done.stderr
    assert ("(a model outside this repository: check that it is one of yours)" in listed[0]) == outside
