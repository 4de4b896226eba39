"""`cadedit fix`'s found tests (tries.found_tests): `--test auto` runs them on every candidate in a
repository the user approved; elsewhere, and without `--test`, the result line only names the command
that would test the edit. The trust rule is docs/trust.md's: a repository's tests are its code."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cadedit.cli.common import say, warn
from cadedit.git.repo import work_tree_root
from cadedit.text.visible import visible
from cadedit.tries.found_tests import AUTO, edited_names, find_tests, repository_approved

NOT_TESTED = "; behaviour not tested (no --test)"


@dataclass(frozen=True)
class Tested:
    """The checks to run (the --test of `plan` resolved) and what the result line adds about behaviour."""

    plan: object
    note: str = ""
    found: str | None = None  # the found tests' command (run or only suggested), for --json

    def to_json(self) -> dict:
        """`found_test` of --json: the command, and whether it ran on the candidates."""
        return {"command": self.found, "ran": self.found is not None and self.plan.test == self.found}


def resolve(document, scope, plan, quiet: bool) -> Tested:
    """--test as given; `auto` becomes the found tests' command (approved repository) or none (said
    why); without --test the found tests are suggested in the result line."""
    if plan.test is not None and plan.test != AUTO:
        return Tested(plan)
    path = Path(document.path)
    root = work_tree_root(path.parent) or path.parent.resolve()
    found = find_tests(path, document.text, edited_names(document, scope.ranges if scope else ()), root)
    where = "" if root == Path.cwd().resolve() else f" in {visible(str(root))}"
    if plan.test is None:
        suggestion = f"; --test auto would run `{visible(found.command)}`{where}" if found else ""
        return Tested(plan, NOT_TESTED + suggestion, found.command if found else None)
    if found is None:
        if not quiet:
            say(f"{document.path}: --test auto: no test of it found (test files named for it, its doctests)")
        return Tested(replace(plan, test=None), "; behaviour not tested (--test auto found no test)")
    if not repository_approved(path.parent):
        warn(
            f"{document.path}: --test auto: {visible(str(root))} is not an approved repository, so cadedit runs "
            f"none of its code; its tests would be `{visible(found.command)}`{where} (approve it: cadedit trust "
            f"{visible(str(root))}, docs/trust.md)"
        )
        return Tested(
            replace(plan, test=None), "; behaviour not tested (--test auto: repository not approved)", found.command
        )
    if not quiet:
        say(f"{document.path}: --test auto: {visible(found.describe())}: `{visible(found.command)}`{where}")
    return Tested(replace(plan, test=found.command, cwd=root), "", found.command)
