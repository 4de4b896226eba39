"""Everyday edits (`cadedit bench everyday`): natural instructions on real modules, run as a user runs
them (`cadedit fix FILE INSTRUCTION --write`, no --test) and judged automatically.

Contract: load_cases(folder) reads corpus/everyday/cases.json; run_case(case, ...) copies the case's
file into a fresh folder, runs `python -m cadedit fix` on it in a subprocess (the package on
`code`'s path, so a checkout of an earlier commit gives the "before" figures) and judges the file
after it: "right" (exit 0, the asked-for change present, the module imports, behaviour equal on the
case's probes, nothing else lost), "honest" (no try passed or cadedit refused: file untouched),
"wrong" (written, but the judge says it is not what was asked) and, of those, "destructive" (the
module no longer imports, a definition not asked about is gone, or a probe's result changed). The
judge is independent of cadedit's checks: it runs the module. No torch here.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated
import typer
from cadedit.bench.options import BackendOpt, JsonOpt, LimitOpt, ModelOpt, ThreadsOpt
from cadedit.cli.common import say
from cadedit.scope.outline import starts_with_docstring
from cadedit.settings import choose_model


CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "everyday"
_PROBE_TIMEOUT_S = 20.0
_LOGGERS = {"logging", "logger", "log", "_log", "_logger", "LOGGER", "LOG"}


@dataclass(frozen=True)
class Case:
    file: str  # relative to the corpus folder: dev/… or heldout/…
    kind: str  # docstring | hints | logging | better | delete | rename
    target: str  # the definition the instruction is about (Class.method for a method)
    instruction: str
    probes: tuple[str, ...] = ()
    new: str = ""  # rename: the new name

    @property
    def part(self) -> str:
        return self.file.split("/", 1)[0]


@dataclass(frozen=True)
class Outcome:
    case: Case
    exit_code: int
    verdict: str  # right | honest | wrong
    destructive: bool = False
    why: str = ""
    seconds: float = 0.0
    said: str = ""  # the last lines cadedit printed on stderr
    diff_lines: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {
            "file": self.case.file,
            "part": self.case.part,
            "kind": self.case.kind,
            "instruction": self.case.instruction,
            "exit": self.exit_code,
            "verdict": self.verdict,
            "destructive": self.destructive,
            "why": self.why,
            "seconds": round(self.seconds, 1),
            "said": self.said,
        }


def load_cases(folder: Path = CORPUS, part: str = "all") -> list[Case]:
    data = json.loads((folder / "cases.json").read_text())
    cases = []
    for c in data["cases"]:
        probes = tuple(data["probes"].get(Path(c["file"]).name, ()))
        case = Case(c["file"], c["kind"], c["target"], c["instruction"], probes, c.get("new", ""))
        if part in ("all", case.part):
            cases.append(case)
    return cases


def run_case(
    case: Case,
    model: str,
    backend: str | None,
    threads: int | None,
    code: Path,
    folder: Path = CORPUS,
    timeout: float = 900.0,
) -> Outcome:
    """The case through `cadedit fix --write` in a subprocess, judged."""
    source = folder / case.file
    before = source.read_text()
    with tempfile.TemporaryDirectory(prefix="cadedit-everyday-") as work:
        target = Path(work) / source.name
        shutil.copyfile(source, target)
        command = [sys.executable, "-m", "cadedit", "fix", target.name, case.instruction, "--write", "--model", model]
        command += ["--backend", backend] if backend else []
        command += ["--threads", str(threads)] if threads else []
        env = {**os.environ, "PYTHONPATH": str(code)}
        start = time.monotonic()
        try:
            done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
            code_, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired:
            code_, stderr = 124, "timed out"
        seconds = time.monotonic() - start
        after = target.read_text()
    said = " | ".join(line for line in stderr.strip().splitlines()[-3:])
    verdict, destructive, why = judge(case, before, after, code_)
    return Outcome(case, code_, verdict, destructive, why, seconds, said[-400:])


def judge(case: Case, before: str, after: str, exit_code: int) -> tuple[str, bool, str]:
    """(verdict, destructive, why) for the file `after` a run that exited `exit_code`."""
    if after == before:
        return (
            ("honest", False, f"exit {exit_code}, file untouched")
            if exit_code != 0
            else ("wrong", False, "exit 0 but nothing written")
        )
    if exit_code != 0:
        return "wrong", True, f"exit {exit_code} but the file changed"
    broken = _broken(case, before, after)
    if broken:
        return "wrong", True, broken
    asked = _asked(case, before, after)
    return ("right", False, "") if not asked else ("wrong", False, asked)


def _broken(case: Case, before: str, after: str) -> str:
    """Why the edit broke the module ("" when it did not): import, definitions lost, probes changed."""
    old, new = _probe(before, case.probes), _probe(after, _renamed(case, case.probes))
    if new.get("error"):
        return f"the module no longer imports: {new['error']}"
    lost = set(_definitions(ast.parse(before))) - set(_definitions(ast.parse(after)))
    lost -= {case.target} if case.kind in ("delete", "rename") else set()
    if lost:
        return "definitions lost: " + ", ".join(sorted(lost))
    for probe, o, n in zip(case.probes, old.get("results", []), new.get("results", [])):
        if o != n and not (case.kind == "delete" and case.target.split(".")[-1] in probe):
            return f"{probe}: {o} before, {n} after"
    return ""


def _asked(case: Case, before: str, after: str) -> str:
    """Why the asked-for change is missing or more was changed ("" when the edit does what was asked)."""
    old, new = ast.parse(before), ast.parse(after)
    defs = _definitions(new)
    name = case.target
    if case.kind == "rename":
        name = (case.target.rsplit(".", 1)[0] + "." if "." in case.target else "") + case.new
    node = defs.get(name)
    if case.kind == "delete":
        listed = _all(new)
        return "still defined" if case.target in defs else "still in __all__" if case.target in listed else ""
    if node is None:
        return "the definition is gone" if case.kind != "rename" else "the new name is not defined"
    if case.kind == "rename":
        old_name = case.target.rsplit(".", 1)[-1]
        used = any(
            isinstance(n, ast.Name) and n.id == old_name or isinstance(n, ast.Attribute) and n.attr == old_name
            for n in ast.walk(new)
        )
        return f"`{old_name}` still used" if used else ""
    if case.kind == "docstring" and ast.get_docstring(node) in (
        None,
        ast.get_docstring(_definitions(old)[case.target]),
    ):
        return "no new docstring"
    if case.kind == "hints" and not (node.returns or any(a.annotation for a in node.args.args + node.args.kwonlyargs)):
        return "no type hints"
    if case.kind == "logging" and not any(_is_logging(n) for n in ast.walk(node)):
        return "no logging call in the function"
    if case.kind in ("docstring", "hints", "logging") and _plain(old) != _plain(new):
        return "code changed beyond what was asked"
    return ""


def _renamed(case: Case, probes: tuple[str, ...]) -> tuple[str, ...]:
    if case.kind != "rename":
        return probes
    return tuple(p.replace(case.target.rsplit(".", 1)[-1], case.new) for p in probes)


def _definitions(tree: ast.AST, prefix: str = "") -> dict[str, ast.AST]:
    found = {}
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[prefix + node.name] = node
            found.update(_definitions(node, prefix + node.name + "."))
        elif isinstance(node, ast.stmt):
            found.update(_definitions(node, prefix))
    return found


def _all(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return set()


def _is_logging(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id in _LOGGERS


class _Strip(ast.NodeTransformer):
    """Docstrings, annotations, imports, logging calls and logger assignments out."""

    def generic_visit(self, node):
        super().generic_visit(node)
        body = getattr(node, "body", None)
        if starts_with_docstring(body):
            node.body = body[1:] or [ast.Pass()]
        return node

    def visit_arg(self, node):
        node.annotation = None
        return node

    def visit_FunctionDef(self, node):
        node.returns = None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node):
        return None if node.value is None else ast.Assign([node.target], node.value)

    def visit_Import(self, node):
        return None

    visit_ImportFrom = visit_Import

    def visit_Expr(self, node):
        return None if _is_logging(node.value) else self.generic_visit(node)

    def visit_Assign(self, node):
        return None if _is_logging(node.value) else self.generic_visit(node)


def _plain(tree: ast.Module) -> str:
    return ast.dump(_Strip().visit(copy.deepcopy(tree)))


_PROBE_SCRIPT = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("module_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(module)
except BaseException as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:200]}))
    sys.exit(0)
results = []
for probe in json.loads(sys.argv[2]):
    try:
        results.append(repr(eval(probe, vars(module))))
    except BaseException as exc:
        results.append(f"raises {type(exc).__name__}")
print(json.dumps({"results": results}))
"""


def _probe(text: str, probes: tuple[str, ...]) -> dict:
    """Import the module from `text` in a fresh interpreter and evaluate the probes in it."""
    with tempfile.TemporaryDirectory(prefix="cadedit-probe-") as folder:
        path = Path(folder) / "module_under_test.py"
        path.write_text(text)
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", _PROBE_SCRIPT, str(path), json.dumps(list(probes))],
                capture_output=True,
                text=True,
                timeout=_PROBE_TIMEOUT_S,
                cwd=folder,
            )
        except subprocess.TimeoutExpired:
            return {"error": "timed out"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}


def summary(outcomes: list[Outcome]) -> dict:
    """Counts per part (dev, heldout, all): right, honest, wrong (passed), destructive-and-written."""
    parts = {}
    for part in ("dev", "heldout", "all"):
        rows = [o for o in outcomes if part == "all" or o.case.part == part]
        if not rows:
            continue
        parts[part] = {
            "cases": len(rows),
            **{v: sum(o.verdict == v for o in rows) for v in ("right", "honest", "wrong")},
            "destructive_written": sum(o.destructive and o.exit_code == 0 for o in rows),
        }
    return parts


def everyday(
    model: ModelOpt = None,
    backend: BackendOpt = None,
    threads: ThreadsOpt = None,
    part: Annotated[
        str, typer.Option("--part", help="dev (read while the checks were built), heldout, or all.")
    ] = "all",
    code: Annotated[
        Path | None,
        typer.Option(
            "--code",
            help="The checkout whose cadedit package runs the edits (an earlier commit gives the before "
            "figures); default: this one.",
            show_default=False,
        ),
    ] = None,
    json_path: JsonOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Everyday edits on real standard-library modules (corpus/everyday), each run as `cadedit fix FILE
    INSTRUCTION --write` without --test and judged by running the module: right, honest (no try passed,
    file untouched), wrong-but-passed, and destructive-and-written.

    Example: cadedit bench everyday --model M.gguf --backend llama --part heldout --json everyday.json
    """
    if part not in ("dev", "heldout", "all"):
        raise typer.BadParameter(f"{part!r} is not one of dev, heldout, all", param_hint="--part")
    cases = load_cases(part=part)[:limit]
    chosen, root = choose_model(model, Path.cwd()), code or Path(__file__).resolve().parents[2]
    outcomes = []
    for case in cases:
        outcome = run_case(case, chosen, backend, threads, root)
        outcomes.append(outcome)
        mark = " DESTRUCTIVE" if outcome.destructive and outcome.exit_code == 0 else ""
        say(
            f"{case.file}: {case.instruction!r}: {outcome.verdict}{mark} (exit {outcome.exit_code}, "
            f"{outcome.seconds:.0f} s){': ' + outcome.why if outcome.why else ''}"
        )
        if json_path is not None:
            json_path.write_text(
                json.dumps(
                    {
                        "model": chosen,
                        "backend": backend,
                        "code": str(root),
                        "summary": summary(outcomes),
                        "cases": [o.to_json() for o in outcomes],
                    },
                    indent=2,
                )
            )
    for name, counts in summary(outcomes).items():
        say(
            f"{name}: {counts['cases']} cases: {counts['right']} right, {counts['honest']} honest, {counts['wrong']} "
            f"wrong but passed, {counts['destructive_written']} destructive and written"
        )
