"""A sketch's blocks merged into one file (cadedit.text.merge) and the merge checked as a candidate is.

Contract: merge_checked(document, blocks, plan, name) merges the blocks one after another (UnplacedError for a
part that fits no place or several) and gives the Merged file with its checks: "merge" (every line the
sketch wrote is in the result, every other line is the file's: merge.fidelity) and check_candidate's
(syntax, the code checks, change, and plan's test with the result in place). Nothing is written here.
"""

from __future__ import annotations

from dataclasses import dataclass

from cadedit.text.diff import unified_diff
from cadedit.text.document import Document, line_body, split_lines
from cadedit.text.merge import fidelity, merge
from cadedit.text.sketch import Block, read_sketch
from cadedit.tries.checks import Check
from cadedit.tries.loop import CheckPlan, check_candidate


@dataclass(frozen=True)
class Merged:
    """One file's merge: the document, its new text, the sketch's forms and placements, its checks."""

    document: Document
    new_text: str
    forms: tuple[str, ...]
    placed: tuple
    checks: tuple[Check, ...]
    diff: str

    @property
    def passed(self) -> bool:
        return all(c.passed or c.skipped for c in self.checks)

    def to_json(self) -> dict:
        return {
            "file": self.document.path,
            "forms": list(self.forms),
            "placed": [p.to_json() for p in self.placed],
            "changed": bool(self.diff),
            "diff": self.diff,
            "passed": self.passed,
            "checks": [
                {"name": c.name, "passed": c.passed, "skipped": c.skipped, "detail": c.detail} for c in self.checks
            ],
        }


def merge_checked(document: Document, blocks: list[Block], plan: CheckPlan, name: str) -> Merged:
    """The blocks merged one after another, the merge's own check against each step, then the checks; the
    diff names the file `name`."""
    lines, forms, placed, problem = document.lines, [], [], ""
    for block in blocks:
        sketch = read_sketch(block.body, tuple(line_body(x) for x in lines), block.first)
        result = merge(lines, sketch)
        problem = problem or fidelity(lines, sketch, result.text)
        forms.append(sketch.form)
        placed.extend(result.placed)
        lines = split_lines(result.text)
    new_text = "".join(lines)
    checks = check_candidate(document, new_text, plan)
    merge_check = Check("merge", not problem, detail=problem or "every sketch line kept, every other line the file's")
    diff = unified_diff(document.text, new_text, name)
    return Merged(document, new_text, tuple(forms), tuple(placed), (merge_check, *checks), diff)
