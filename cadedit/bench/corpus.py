"""Benchmark corpora: JSONL files of (before, after, instruction) edit cases.

The corpus format, one JSON object per line:

    {"id": "py/0", "language": "python", "before": "...", "after": "...",
     "instruction": "Fix bugs in f.", "test": "assert f(1) == 2\\n", "prefix": "import math\\n"}

`id`, `language`, `before`, `after` and `instruction` are required strings; `test` (code run after
the edited text to check it) and `prefix` (code that must precede the edited text when the test
runs, e.g. a function signature) are optional. Two other record shapes are read as they come,
detected per record: HumanEvalPack (`buggy_solution` -> `canonical_solution`, instruction
"Fix bugs in {entry_point}.", test = `test`, prefix = `declaration`, as the paper uses it) and the
Aider polyglot export (`input_code` -> `gold_code`, `instructions`, `test_files`). A bad file or
record raises CorpusError naming file:line. Pure: no torch, no transformers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cadedit.text.document import Document
from cadedit.errors import CadeditError


class CorpusError(CadeditError):
    """A corpus file cannot be read, or one of its records has the wrong shape."""


@dataclass(frozen=True)
class Case:
    """One edit: the document before, the gold document after, and how to check it."""

    id: str
    language: str
    before: str
    after: str
    instruction: str
    test: str | None = None
    prefix: str = ""
    test_files: tuple[tuple[str, str], ...] = ()  # (name, text): unittest files beside the edited file
    solution_file: str = ""  # the edited file's name, which the test files import (polyglot)

    @property
    def before_doc(self) -> Document:
        return Document.from_text(self.before, f"{self.id}:before")

    @property
    def after_doc(self) -> Document:
        return Document.from_text(self.after, f"{self.id}:after")


GENERIC = ("id", "language", "before", "after", "instruction")
HUMANEVALPACK = ("task_id", "buggy_solution", "canonical_solution", "entry_point")
POLYGLOT = ("id", "input_code", "gold_code", "instructions")


def _require_strings(record: dict, keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if not isinstance(record.get(key), str):
            found = "missing" if key not in record else f"a {type(record[key]).__name__}"
            raise CorpusError(f"{where}: field {key!r} must be a string, found {found}")


def _language(task_id: str, record: dict) -> str:
    language = record.get("language")
    return language if isinstance(language, str) else task_id.split("/")[0].lower()


CONTEXTS = ("body", "docs", "nodocs")


def case_from_record(record: object, where: str, context: str = "body") -> Case:
    """One Case from a decoded JSON record of any supported shape; `where` is "file:line".

    context, for HumanEvalPack records: "body" edits the buggy body with the declaration as the
    test's prefix (the paper's counting); "docs" edits the whole file with its docstring
    (input_code_docs -> gold_code_docs), as a user would hand it over; "nodocs" the whole file
    without the docstring."""
    if not isinstance(record, dict):
        raise CorpusError(f"{where}: expected a JSON object, found {type(record).__name__}")
    if all(k in record for k in ("before", "after")):
        _require_strings(record, GENERIC, where)
        test = record.get("test")
        if test is not None and not isinstance(test, str):
            raise CorpusError(f"{where}: field 'test' must be a string or absent")
        return Case(
            record["id"],
            record["language"],
            record["before"],
            record["after"],
            record["instruction"],
            test,
            str(record.get("prefix") or ""),
        )
    if all(k in record for k in HUMANEVALPACK):
        _require_strings(record, HUMANEVALPACK, where)
        if context != "body":
            before, after = f"input_code_{context}", f"gold_code_{context}"
            _require_strings(record, (before, after), where)
            return Case(
                record["task_id"],
                _language(record["task_id"], record),
                record[before],
                record[after],
                f"Fix bugs in {record['entry_point']}.",
                record.get("test"),
                "",
            )
        return Case(
            record["task_id"],
            _language(record["task_id"], record),
            record["buggy_solution"],
            record["canonical_solution"],
            f"Fix bugs in {record['entry_point']}.",
            record.get("test"),
            str(record.get("declaration") or ""),
        )
    if all(k in record for k in POLYGLOT):
        _require_strings(record, POLYGLOT, where)
        files = record.get("test_files") or {}
        names = [record.get("solution_file") or "solution.py", *files]
        if (
            not isinstance(files, dict)
            or not all(isinstance(v, str) for v in files.values())
            or any(not isinstance(n, str) or Path(n).name != n or n in (".", "..") for n in names)
        ):
            raise CorpusError(
                f"{where}: solution_file and test_files must be plain file names (with texts)",
                hint="a polyglot record names its files, not paths",
            )
        return Case(
            record["id"],
            _language(record["id"], record),
            record["input_code"],
            record["gold_code"],
            record["instructions"],
            None,
            "",
            tuple(sorted(files.items())),
            names[0],
        )
    raise CorpusError(
        f"{where}: unknown record shape (keys: {', '.join(sorted(record)[:8])})",
        hint="a record needs id, language, before, after, instruction (or a HumanEvalPack / polyglot record)",
    )


def load_corpus(path: str | Path, limit: int | None = None, context: str = "body") -> list[Case]:
    """All cases of a JSONL corpus, in file order (the first `limit` when given). Blank lines are skipped."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{p}: cannot read corpus ({getattr(exc, 'strerror', None) or exc})") from None
    cases: list[Case] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
        case = case_from_record(record, where, context)
        if case.id in seen:
            raise CorpusError(f"{where}: duplicate id {case.id!r}")
        seen.add(case.id)
        cases.append(case)
        if limit is not None and len(cases) >= limit:
            break
    if not cases:
        raise CorpusError(f"{p}: corpus has no cases")
    return cases


EXTENSIONS = {
    "python": ".py",
    "py": ".py",
    "javascript": ".js",
    "js": ".js",
    "typescript": ".ts",
    "go": ".go",
    "rust": ".rs",
    "java": ".java",
    "cpp": ".cpp",
    "c++": ".cpp",
    "c": ".c",
}


@dataclass(frozen=True)
class Edited:
    """What one method made of a document, and what it cost in model work."""

    text: str
    output: str  # the program text or the raw rewrite, as the model wrote it
    forward_passes: int | None  # None: the decoder does not count them (transformers' prompt lookup)
    tokens_new: int  # tokens the model produced (program: sampled + forced literals)
    tokens_spliced: int = 0
    seconds_prefill: float = 0.0
    tokens_prompt: int | None = None  # prompt tokens fed (None: not counted, a peer)
    tokens_stepped: int | None = None  # output tokens the model wrote one step each (not a kept draft)


def document_for(case: Case) -> Document:
    """The case's input as a file named for its language, so both prompts show a file name."""
    ext = EXTENSIONS.get(case.language.lower())
    return Document.from_text(case.before, f"solution{ext}" if ext else "<text>")
