"""The names check on JavaScript (cadedit.scope.js_names through cadedit.tries.code_checks): `cadedit fix app.js`
with scripted candidates fails one that leaves a name undefined, with a one-line reason the next try
is told, and writes nothing; a global the file already used is no new problem. The table below pins
the scopes one at a time on the check itself.
"""

from __future__ import annotations

import pytest

from cadedit.tries.code_checks import code_checks
from tests.scripting import invoke
from tests.test_tries_cli import load_once, scripted, tries_lines, work, _models  # noqa: F401 (fixtures)

# `$` is defined nowhere in the file: a global of the page that loads it (jQuery).
APP = """\
function total(xs) {
  let s = 0;
  for (const x of xs) {
    s += x;
  }
  return s;
}

$('#total').text(total([1, 2]));
module.exports = { total };
"""


def fix_js(tiny_dir, instruction: str, *args: str):
    return invoke(
        [
            "fix",
            "app.js",
            instruction,
            "--model",
            str(tiny_dir),
            "--dtype",
            "fp32",
            "--threads",
            "1",
            "--candidates",
            "1",
            "--no-scope",
            "--write",
            *args,
        ]
    )


@pytest.fixture
def app(work):
    (work / "app.js").write_text(APP)
    return work / "app.js"


def test_an_answer_that_uses_an_undefined_name_fails_names_and_is_never_written(app, tiny_dir, scripted):
    calls = scripted(APP.replace("  return s;", "  return round(s);"))
    result = fix_js(tiny_dir, "Round the total.")
    assert result.exit_code == 3, result.output
    lines = tries_lines(result.stderr)
    assert lines[0].split(": try 1 of 3: ", 1)[1].startswith("failed: names (line 6: undefined name 'round')")
    assert "leaves a name undefined or unused (line 6: undefined name 'round')" in calls[1].prompt
    assert app.read_text() == APP


def test_a_deleted_declaration_whose_name_is_still_used_fails_names(app, tiny_dir, scripted):
    scripted(APP.replace("  let s = 0;\n", ""))
    result = fix_js(tiny_dir, "Make total shorter.")
    assert result.exit_code == 3, result.output
    assert (
        tries_lines(result.stderr)[0]
        .split(": try 1 of 3: ", 1)[1]
        .startswith("failed: names (line 3: undefined name 's' (and 1 more))")
    )
    assert app.read_text() == APP


def test_globals_the_file_already_used_and_the_platforms_pass(app, tiny_dir, scripted):
    rounded = APP.replace("  return s;", "  console.log($.now(), process.argv.length);\n  return Math.round(s);")
    scripted(rounded)
    result = fix_js(tiny_dir, "Round the total and log it.")
    assert result.exit_code == 0, result.output
    assert "passed: syntax, names, kept, body, change, try 1 of 3" in result.stderr
    assert app.read_text() == rounded


# -- the scopes, on the check itself ------------------------------------------------------------


def names(before: str, after: str):
    return next(c for c in code_checks("m.js", before, after, "Fix it.") if c.name == "names")


DEFINED = [
    ("parameters and defaults", "function f(a, b = a, ...rest) { return b + rest.length; }"),
    ("destructured parameters", "const f = ({a, b: [c]}, [d = 1]) => a + c + d;"),
    ("let, const, var and hoisting", "function f() { g(); var v = 1; return v + k; function g() {} }\nconst k = 2;"),
    ("a function declared in a block", "function f(x) { if (x) { function g() { return 1; } } return g(); }"),
    ("destructuring", "const {a, b: {c}, d = 2, ...e} = obj;\nconst [p, , ...q] = a + c + d + e;\nf(p, q);"),
    ("imports", "import d, {a as b} from 'm';\nimport * as ns from 'n';\nd(b, ns);"),
    ("require", "const {readFile} = require('fs');\nreadFile('x');"),
    ("catch parameters", "try { f(); } catch ({message}) { console.log(message); }"),
    ("for-of and for-in bindings", "for (const [k, v] of pairs()) f(k, v);\nfor (let key in obj) f(key);"),
    ("class names and members", "class A extends Error { #n = 1; get n() { return this.#n; } }\nnew A();"),
    ("a named function expression", "const f = function loop(n) { return n ? loop(n - 1) : 0; };"),
    ("object shorthand", "const a = 1;\nconst o = {a, b: a, [a]: 2, m() { return o; }};"),
    ("member access uses only its object", "const o = {};\no.missing.deeper = o.also;"),
    ("labels", "outer: for (const x of xs()) { for (;;) { if (x) break outer; continue outer; } }"),
    ("typeof guards", "if (typeof window === 'undefined' && typeof Deno !== 'undefined') {}"),
    ("exports", "const a = 1;\nexport { a as b };\nexport { c } from 'm';"),
    ("assignment to a declared name", "let a;\n[a] = [1];\n({a} = {a: 2});\nf(a);"),
    ("JSX components", "import Foo from 'foo';\nconst el = <Foo.Bar x={1}><div /></Foo.Bar>;"),
    ("template strings", "const n = 1;\nconst s = `${n} items`;\nf(s);"),
    ("an ESLint globals comment", "/* globals config, yes:writable */\n/*global  a b */\nf(config, yes, a, b);"),
]


@pytest.mark.parametrize("code", [c for _, c in DEFINED], ids=[i for i, _ in DEFINED])
def test_names_bound_by_every_scope_rule_are_defined(code):
    before = "function f() {}\nfunction xs() { return []; }\nfunction pairs() { return []; }\nconst obj = {};\n"
    check = names(before, before + code + "\n")
    assert check.passed and not check.skipped, check.detail


UNDEFINED = [
    (
        "a block's let outside it",
        "function f(x) { if (x) { let y = 1; console.log(y); } return y; }",
        "line 1: undefined name 'y'",
    ),
    ("a parameter outside its function", "function f(a) { return a; }\nf(a);", "line 2: undefined name 'a'"),
    ("a catch parameter after the catch", "try {} catch (e) {}\nconsole.log(e);", "line 2: undefined name 'e'"),
    ("a loop binding after the loop", "for (const x of []) {}\nconsole.log(x);", "line 2: undefined name 'x'"),
    ("an object shorthand", "const o = {missing};", "line 1: undefined name 'missing'"),
    ("an assignment to an undeclared name", "function f() { total = 1; }", "line 1: undefined name 'total'"),
    ("a JSX component", "const el = <Missing />;", "line 1: undefined name 'Missing'"),
    ("a template substitution", "const s = `${missing}`;", "line 1: undefined name 'missing'"),
    (
        "a newly unused local",
        "function f() { const unused = 1; return 2; }",
        "line 1: local variable 'unused' is assigned to but never used",
    ),
]


@pytest.mark.parametrize("code, said", [(c, s) for _, c, s in UNDEFINED], ids=[i for i, _, _ in UNDEFINED])
def test_names_outside_their_scope_are_undefined(code, said):
    check = names("", code + "\n")
    assert not check.passed and check.detail == said


def test_only_what_the_edit_newly_leaves_counts():
    before = "describe('x', () => { it('y', () => helper()); });\nfunction f() { let old = 1; }\n"
    after = before.replace("helper()", "expect(helper()).toBe(1)").replace("let old = 1;", "let old = 2;")
    assert names(before, after).passed  # `describe` already used: a test file, so `expect` is its runner's
    assert not names("let a = 1;\n", "let a = 1;\nf(b);\n").passed


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
def test_the_reason_names_the_line_as_the_file_counts_it(newline):
    before = newline.join(["const a = 1;", "", "f(a);", ""])
    check = names(before, before + newline.join(["", "g(b);", ""]))
    assert check.detail.startswith("line 5: undefined name 'g'")


LOGGED = 'function minutes(s) {\n  console.log("debug", s);\n  return s / 60;\n}\n\nfunction hours(s) {\n  return s / 3600;\n}\n'


def test_an_empty_answer_to_remove_the_console_log_calls_fails_and_nothing_is_written(work, tiny_dir, scripted):
    (work / "app.js").write_text(LOGGED)
    scripted("")
    result = fix_js(tiny_dir, "Remove the console.log calls.")
    assert result.exit_code == 3, result.output
    first = tries_lines(result.stderr)[0]
    assert "failed: kept (removed `minutes` (line 1), which the instruction does not ask to remove)" in first
    assert "change (the edit empties the file, which the instruction does not ask for)" in first
    assert (work / "app.js").read_text() == LOGGED
