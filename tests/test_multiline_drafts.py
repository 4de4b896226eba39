"""Multi-line edits cost what they change: `cadedit fix --lines` on real code in every layout a
region comes in (a method, a nested function, a whole class, a decorated method, module-level
statements, a JavaScript class method), with a scripted answer through the real decode loop (tiny
random Qwen2, real FenceCursor and verify drafter), counted in the forwards `--json` reports.

A region indented as a whole is asked for without its indentation; small models often retype it
with it all the same, so each answer is written both ways. An answer equal to the region is
drafted whole (forwards at most 5% of its tokens and a few); one with a name changed on every
third line costs its changed tokens and a few forwards per changed line (the drafts resume
mid-line after each change).
"""

from __future__ import annotations

import ast
import difflib
import json
import keyword
import re
from pathlib import Path

import pytest

from cadedit.decode.loop import script_sampler
from cadedit.backends.model import encode, token_bytes
from tests.scripting import inject_picks, invoke
from tests.test_tries_cli import _models, load_once  # noqa: F401 - fixtures: each model folder loads once

DATA = Path(__file__).parent / "data" / "multiline"

# layout: (file, first line of the region, last line)
LAYOUTS = {
    "method": ("method.py", "    def _handle_long_word", "            cur_line.append(reversed_chunks.pop())"),
    "nested-function": ("nested.py", "    def register(cls, func=None):", "        return func"),
    "class-body": ("class_body.py", "class Dialect:", "            raise Error(str(e))"),
    "decorated-method": ("decorated.py", "    @classmethod", "        return cls(*f.as_integer_ratio())"),
    "module-statements": ("module.py", "whitespace = ", "printable = "),
    "javascript-method": ("method.js", "  attachFerrises(type) {", "  }"),
}
JS_WORDS = {"var", "let", "const", "for", "of", "in", "if", "else", "this", "new", "class", "return", "function"}


def region_of(layout: str) -> tuple[str, int, int]:
    """The file's name and the region's line range (1-based, inclusive)."""
    name, first, last = LAYOUTS[layout]
    lines = (DATA / name).read_text().splitlines()
    a = next(k for k, line in enumerate(lines, 1) if line.startswith(first))
    b = next(k for k, line in enumerate(lines, 1) if k > a and line.startswith(last))
    return name, a, b


def renamed_every_third_line(text: str, python: bool) -> str:
    """text with the last name of every third non-blank line renamed (name -> name_2), the file
    still valid Python where it is Python (a `nonlocal` name must stay bound)."""
    lines, count = text.split("\n"), 0
    for k, line in enumerate(lines):
        if not line.strip() or line.strip() == "```":
            continue
        count += 1
        if count % 3:
            continue
        names = [
            m
            for m in re.finditer(r"\b[A-Za-z_]\w+\b", line)
            if not keyword.iskeyword(m.group()) and m.group() not in JS_WORDS
        ]
        for m in reversed(names):
            lines[k] = line[: m.start()] + m.group() + "_2" + line[m.end() :]
            if not python or _parses_in_place("\n".join(lines)):
                break
            lines[k] = line
    return "\n".join(lines)


def renamed_everywhere(text: str) -> str:
    """text with every use of its most used local-looking name renamed (name -> name_2): the name of
    three or more characters used most often, not a keyword, `self` or `this`."""
    words = [w for w in re.findall(r"\b[A-Za-z_]\w{2,}\b", text) if not keyword.iskeyword(w) and w not in JS_WORDS]
    words = [w for w in words if w not in {"self", "cls", "None", "True", "False"}]
    name = max(set(words), key=lambda w: (words.count(w), w))
    return re.sub(rf"\b{name}\b", name + "_2", text)


def wrapped_in_try(text: str) -> str:
    """text with the body of its first function (every line after the `def` line, to the fence)
    wrapped in `try:` / `except ValueError: raise`: the body re-indented by four spaces."""
    lines = text.split("\n")
    at = next(k for k, line in enumerate(lines) if line.lstrip().startswith("def ")) + 1
    end = next(k for k in range(at, len(lines)) if lines[k].strip() == "```")
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    body = ["    " + line if line.strip() else line for line in lines[at:end]]
    handler = [indent + "except ValueError:", indent + "    raise"]
    return "\n".join(lines[:at] + [indent + "try:"] + body + handler + lines[end:])


def _parses_in_place(answer: str) -> bool:
    body = answer[: answer.rindex("```")]
    try:
        ast.parse("if True:\n" + "".join("    " + line + "\n" for line in body.splitlines()))
    except SyntaxError:
        return False
    return True


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def answering(monkeypatch):
    """answering(answer): every try spells answer(prepared), canonically tokenised (as a model
    writes); returns what each try was asked (the prepared requests)."""
    asked = []

    def script(answer):
        def picks(k: int):
            def make_sampler(loaded, document, prepared):
                asked.append(prepared)
                return script_sampler(
                    answer(prepared), token_bytes(loaded), lambda text: encode(loaded.tokenizer, text)
                )

            return make_sampler if k else None

        inject_picks(monkeypatch, picks)
        return asked

    return script


def fix_json(tiny_dir, name: str, a: int, b: int, exit_code: int | tuple[int, ...] = 0) -> dict:
    """`cadedit fix --json` on lines a-b, one try (an answer that changes nothing fails it: exit 3)."""
    result = invoke(
        [
            "fix",
            name,
            "Rename some names.",
            "--lines",
            f"{a}-{b}",
            "--json",
            "--quiet",
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--candidates",
            "1",
            "--tries",
            "1",
        ]
    )
    assert result.exit_code in (exit_code if isinstance(exit_code, tuple) else (exit_code,)), result.output
    return json.loads(result.stdout)


def unchanged(prepared, indented: bool) -> str:
    """The answer that changes nothing, in the file's indentation or without the region's."""
    if indented and prepared.draft_indented is not None:
        return prepared.draft_indented[0]
    return prepared.source


def changed_tokens(tokenizer, before: str, after: str) -> tuple[int, int]:
    """Tokens of `after` outside the token runs it shares with `before`, and the lines that differ."""
    old, new = encode(tokenizer, before), encode(tokenizer, after)
    codes = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    tokens = sum(j2 - j1 for tag, _, _, j1, j2 in codes if tag != "equal")
    lines = sum(1 for x, y in zip(before.split("\n"), after.split("\n")) if x != y)
    return tokens, lines


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    from cadedit.backends.model import load_model

    return load_model(str(tiny_dir), dtype="fp32", threads=1).tokenizer


@pytest.mark.parametrize("indented", [True, False], ids=["as-in-the-file", "without-its-indentation"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_answer_equal_to_the_region_is_drafted_whole(work, tiny_dir, answering, layout, indented):
    name, a, b = region_of(layout)
    (work / name).write_bytes((DATA / name).read_bytes())
    asked = answering(lambda prepared: unchanged(prepared, indented))
    data = fix_json(tiny_dir, name, a, b, exit_code=3)  # 3: no try passed its checks
    assert data["changed"] is False
    assert (work / name).read_bytes() == (DATA / name).read_bytes()
    stats = data["statistics"]
    new = stats["tokens_sampled"] + stats["tokens_forced"]
    assert len(asked) == 1 and new >= 100
    assert stats["forward_passes"] <= 0.05 * new + 3, stats


@pytest.mark.parametrize("indented", [True, False], ids=["as-in-the-file", "without-its-indentation"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_rename_on_every_third_line_costs_what_it_changes(work, tiny_dir, answering, tokenizer, layout, indented):
    name, a, b = region_of(layout)
    (work / name).write_bytes((DATA / name).read_bytes())
    python = name.endswith(".py")
    answers = []

    def answer(prepared):
        answers.append((unchanged(prepared, indented), renamed_every_third_line(unchanged(prepared, indented), python)))
        return answers[-1][1]

    answering(answer)
    # A renamed use can leave a name undefined, which the `names` check fails (exit 3): the drafts' cost
    # is what this measures, and --json reports it for a failed try too.
    data = fix_json(tiny_dir, name, a, b, exit_code=(0, 3))
    assert data["changed"] is True
    before, after = answers[0]
    tokens, lines = changed_tokens(tokenizer, before, after)
    assert lines >= (b - a) // 6 and data["diff"].count("_2") == lines
    assert data["statistics"]["forward_passes"] <= tokens + 3 * lines + 5, (data["statistics"], tokens, lines)


@pytest.mark.parametrize("indented", [True, False], ids=["as-in-the-file", "without-its-indentation"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_rename_of_every_use_costs_its_first_uses(work, tiny_dir, answering, tokenizer, layout, indented):
    """A name renamed on every line it is used: once the answer made the rename on two uses, the
    drafts make it too, so the region costs what it costs unchanged and a few forwards for each of the
    first two renamed lines, however many lines follow."""
    name, a, b = region_of(layout)
    (work / name).write_bytes((DATA / name).read_bytes())
    answers = []

    def answer(prepared):
        before = unchanged(prepared, indented)
        answers.append((before, before if len(answers) == 0 else renamed_everywhere(before)))
        return answers[-1][1]

    answering(answer)
    as_it_is = fix_json(tiny_dir, name, a, b, exit_code=3)["statistics"]["forward_passes"]
    data = fix_json(tiny_dir, name, a, b, exit_code=(0, 3))
    assert data["changed"] is True
    _, lines = changed_tokens(tokenizer, *answers[-1])
    assert data["statistics"]["forward_passes"] <= as_it_is + 6 * min(lines, 2) + 1, (data["statistics"], lines)


@pytest.mark.parametrize("layout", ["method", "nested-function", "decorated-method"])
def test_a_body_wrapped_in_try_costs_its_new_lines(work, tiny_dir, answering, tokenizer, layout):
    """A function's body wrapped in try/except, the answer in the file's indentation: every body line
    re-indented. Once the answer re-indented one line, the drafts re-indent the next ones, so the
    answer costs what it costs unchanged and its new lines (their tokens, 3 forwards each and 5),
    however long the body is. (Without its indentation, the body wrapped is indented as in the file,
    which the drafter follows anyway.)"""
    name, a, b = region_of(layout)
    (work / name).write_bytes((DATA / name).read_bytes())
    answers = []

    def answer(prepared):
        before = unchanged(prepared, True)
        answers.append(before if not answers else wrapped_in_try(before))
        return answers[-1]

    answering(answer)
    as_it_is = fix_json(tiny_dir, name, a, b, exit_code=3)["statistics"]["forward_passes"]
    data = fix_json(tiny_dir, name, a, b, exit_code=(0, 3))
    assert data["changed"] is True and "try:" in answers[-1]
    new_lines = [line for line in answers[-1].split("\n") if line.strip() in ("try:", "except ValueError:", "raise")]
    typed = len(encode(tokenizer, "\n".join(new_lines) + "\n"))
    bound = as_it_is + typed + 3 * len(new_lines) + 5
    assert data["statistics"]["forward_passes"] <= bound, (data["statistics"], as_it_is, typed)
