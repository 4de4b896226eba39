"""Checks that compare a candidate's code with the file's before the edit: what small models break
while the file still parses (docs/checks.md says why each exists).

Contract: code_checks(path, before, after, instruction) returns checks.Check records, each passed,
failed with a one-line detail the next try is told, or skipped with a note (none for a language
without a parser; "names", "kept" and "body" only for JavaScript, "kept" and "body" for TypeScript):
- "names": names the edit leaves undefined or newly unused (Python through pyflakes, JavaScript
  through cadedit.scope.js_names; only problems the file did not have before count);
- "kept": definitions the edit removed, and for a request that asks for documentation, type hints
  or logging only, statements it removed or changed; a function whose every `return` went;
- "body": a function whose code became another definition's code;
- "public": a top-level name removed while `__all__` or the module's other code still uses it;
- "asked": a request for documentation, type hints or logging only whose candidate adds none; a
  request to delete a named definition whose candidate keeps it.
Python through `ast`; JavaScript/TypeScript by the tree-sitter outline (definitions and their
text) and, for JavaScript, its scopes. Pure: no torch, no transformers; never raises for bad file content.
"""

from __future__ import annotations

import ast
import copy
import difflib
import keyword
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from cadedit.tries.checks import Check, asks_to_empty
from cadedit.text.document import Document
from cadedit.scope.js_names import GROUPS, js_names
from cadedit.text.languages import language_of
from cadedit.scope.outline import JAVASCRIPT, outline

NAMES, KEPT, BODY, PUBLIC, ASKED = "names", "kept", "body", "public", "asked"
CHECK_NAMES = (NAMES, KEPT, BODY, PUBLIC, ASKED)
# pyflakes findings that break a module or show a lost line; an import left unused by an asked-for
# deletion is harmless and is not one of them.
_FAILING = (
    "UndefinedName",
    "UndefinedLocal",
    "UndefinedExport",
    "UnusedVariable",
    "RedefinedWhileUnused",
    "UnusedAnnotation",
)
# A request for these changes no behaviour: the code apart from docstrings, annotations, imports
# and logging must stay the same statement for statement.
_NO_BEHAVIOUR = re.compile(
    r"\b(?:doc\s?strings?|comments?|type\s+hints?|type\s+annotations?|annotat\w*|typing|"
    r"typed|logging|log|logs|logger|debug\s+messages?|document\w*|jsdoc)\b",
    re.I,
)
_BEHAVIOUR = re.compile(
    r"\b(?:fix\w*|bugs?|implement\w*|handle\w*|support\w*|refactor\w*|improve\w*|better|"
    r"optimi[sz]\w*|rename\w*|replace\w*|remove\w*|delete\w*|drop\w*|rewrite\w*|convert\w*|"
    r"validat\w*|raise\w*|simplif\w*|change\w*|move\w*|merge\w*|inline\w*|split\w*)\b",
    re.I,
)
_REMOVAL = re.compile(
    r"\b(?:delete|remove|drop|erase|rename|merge|combine|inline|replace|move|strip)\w*|\bget\s+rid\s+of\b",
    re.I,
)
_DELETING = re.compile(r"\b(?:delete|remove|drop|erase|strip)\w*|\bget\s+rid\s+of\b", re.I)
# Where a removal word's objects end: a word that says where the change goes or what comes instead,
# or the end of the clause.
_CLAUSE_END = re.compile(
    r"\b(?:in|inside|within|of|from|to|into|with|as|by|for|so|then|but|because|while|after|before|"
    r"using|which|that|keeping|keep|and\s+(?:then|also|add|fix|make|keep|update|use|change))\b|[.;:!?](?=\s|$)|\n",
    re.I,
)
_DEAD = re.compile(r"\b(?:dead\s+code|unused|never\s+(?:used|called)|helpers?)\b", re.I)
_LOGGERS = {"logging", "logger", "log", "_log", "_logger", "LOGGER", "LOG", "console"}
_SIMILAR = 0.8  # a changed body this close to another definition's (and closer than to its own) is a copy


def code_checks(path: str, before: str, after: str, instruction: str) -> tuple[Check, ...]:
    """The four checks of the module docstring for a candidate `after` of the file `path`."""
    language = language_of(path)
    parser = language.parser if language is not None else ""
    try:
        if parser == "python":
            return _python_checks(path, before, after, instruction)
        if parser in ("javascript", "typescript", "tsx"):
            return _outline_checks(path, before, after, instruction, parser)
    except RecursionError:  # pyflakes, ast.unparse and deepcopy recurse: a 200-branch elif is too deep for them
        return _skipped("the code is nested too deeply to check here")
    return ()  # no parser for the language: nothing to compare


def asks_for_behaviour(instruction: str) -> bool:
    """Whether the instruction may change what code does: not when it asks only for documentation,
    type hints or logging."""
    return not _NO_BEHAVIOUR.search(instruction) or bool(_BEHAVIOUR.search(instruction))


def asks_to_remove(instruction: str, name: str, unused: bool = False) -> bool:
    """Whether the instruction asks to remove (or rename, merge, move, inline, replace) definition
    `name`: the name follows a removal word in its clause, before a word that names where the change
    goes ("Rename shorten to truncate", "Delete lerp and clamp"; not "Replace the loop in total" nor
    "Inline _helper into f"); a file the instruction asks to empty loses everything (asks_to_empty).
    "Dead code" or "unused" with no name lets go a private helper nothing else uses (`unused`).
    "Remove X" where X is statements ("the debug prints") never lets a definition go."""
    if asks_to_empty(instruction):
        return True
    if name in removal_targets(instruction):
        return True
    return unused and bool(_DEAD.search(instruction))


def removal_targets(instruction: str, deletion: bool = False) -> set[str]:
    """The words that follow a removal word in their clause, up to a word that says where or into what
    ("in", "from", "to", "into", "with", ...): the names of what the instruction removes or renames
    (`deletion`: removes, not renames, moves or merges)."""
    found: set[str] = set()
    for verb in (_DELETING if deletion else _REMOVAL).finditer(instruction):
        clause = _CLAUSE_END.split(instruction[verb.end() :], 1)[0]
        found |= set(re.findall(r"[A-Za-z_$][\w$]*", clause))
    return found


def unused_in(text: str, name: str, private: bool) -> bool:
    """Whether `name` appears in the file's text only once (its definition), and is private (a leading
    underscore; `private`: the caller knows it is not exported)."""
    return (private or name.startswith("_")) and len(re.findall(rf"(?<![\w$]){re.escape(name)}(?![\w$])", text)) == 1


# -- Python --------------------------------------------------------------------------------------


def _unused_now(before: str, new: ast.Module, name: str) -> bool:
    """Whether a removed private definition was used by nothing (unused_in), or by nothing the edit kept:
    the helper of a definition deleted with it ("Delete f and its now-unused helpers")."""
    if unused_in(before, name, False):
        return True
    return name.startswith("_") and not any(
        isinstance(n, ast.Name) and n.id == name or isinstance(n, ast.Attribute) and n.attr == name
        for n in ast.walk(new)
    )


@dataclass(frozen=True)
class _Definition:
    qualname: str
    node: ast.AST
    line: int


def _python_checks(path: str, before: str, after: str, instruction: str) -> tuple[Check, ...]:
    try:
        old, new = ast.parse(before.removeprefix("\ufeff")), ast.parse(after.removeprefix("\ufeff"))
    except (SyntaxError, ValueError, RecursionError):
        return _skipped("the code does not parse here")
    old_defs, new_defs = _definitions(old), _definitions(new)
    old_code, new_code = _codes(old_defs), _codes(new_defs)
    removed = [d for q, d in old_defs.items() if q not in new_defs and not _moved(d, old_code, new_defs, new_code)]
    gone_public = _gone_public(old, new)
    return (
        _names_check(path, old, new, gone_public),
        _kept_check(old, new, old_defs, new_defs, removed, instruction, (old_code, new_code), before),
        _body_check(old_defs, new_defs, old_code, new_code),
        _public_check(path, new, gone_public, removed, new_defs),
        *_asked_check(old, new, instruction, after == before, old_defs, new_defs),
    )


def _short_name(d: _Definition) -> str:
    return d.qualname.rsplit(".", 1)[-1]


def _skipped(note: str) -> tuple[Check, ...]:
    return tuple(Check(name, True, True, note) for name in CHECK_NAMES)


def _codes(defs: dict[str, _Definition]) -> dict[str, str]:
    """Each definition's code (_code), computed once for every check that compares it."""
    return {q: _code(d.node) for q, d in defs.items()}


def _moved(d: _Definition, old_code: dict, new_defs: dict, new_code: dict) -> bool:
    """Whether a definition gone from its qualified name reappears under another one (moved into a
    class, nested in its caller) with its name, its kind and its code (names of locals aside)."""
    name = d.qualname.rsplit(".", 1)[-1]
    return any(
        q.rsplit(".", 1)[-1] == name and type(e.node) is type(d.node) and _alike(old_code[d.qualname], new_code[q])
        for q, e in new_defs.items()
        if q not in old_code
    )


def _alike(a: str, b: str) -> bool:
    """The same code, or alike (_SIMILAR) as it is or with every name numbered by its first use."""
    return a == b or _similarity(a, b) >= _SIMILAR or _similarity(_numbered(a), _numbered(b)) >= _SIMILAR


def _numbered(code: str) -> str:
    """The code with each name (not a keyword) replaced by the order of its first appearance."""
    order: dict[str, str] = {}

    def number(m: re.Match) -> str:
        word = m[0]
        return word if keyword.iskeyword(word) else order.setdefault(word, f"n{len(order)}")

    return re.sub(r"[A-Za-z_]\w*", number, code)


def _definitions(tree: ast.Module) -> dict[str, _Definition]:
    found: dict[str, _Definition] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = prefix + child.name
                found.setdefault(qualname, _Definition(qualname, child, child.lineno))
                walk(child, qualname + ".")
            elif isinstance(child, ast.stmt):
                walk(child, prefix)  # a definition under `if`/`try` keeps its enclosing name

    walk(tree, "")
    return found


def _flakes(path: str, tree: ast.Module) -> list | None:
    """pyflakes' messages on a parsed module, None where pyflakes is not installed."""
    try:
        from pyflakes.checker import Checker
    except ModuleNotFoundError:
        return None
    return [m for m in Checker(tree, filename=path).messages if type(m).__name__ in _FAILING]


def _key(message) -> tuple:
    return type(message).__name__, tuple(str(a) for a in message.message_args)


def _said(message) -> str:
    return f"line {message.lineno}: " + message.message % message.message_args


def _names_check(path: str, old: ast.Module, new: ast.Module, gone_public: set[str]) -> Check:
    """Undefined or newly unused names that the file did not have before. The public check reports
    the ones about a removed top-level name; a new undefined name where an undefined one went is a
    rename of what was already broken ("rename old to new" in a file that never defined `old`)."""
    star = _added_star(old, new)
    if star is not None:
        return Check(
            NAMES,
            False,
            detail=f"line {star.lineno}: `from {star.module} import *` added, which hides undefined names "
            "from every check: import the names you use",
        )
    before, after = _flakes(path, old), _flakes(path, new)
    if before is None or after is None:
        return Check(NAMES, True, True, "pyflakes is not installed: names not checked")
    had = Counter(_key(m) for m in before)
    undefined = lambda found: Counter(_key(m) for m in found if type(m).__name__ == "UndefinedName")  # noqa: E731
    renames = sum((undefined(before) - undefined(after)).values())
    found = []
    for message in after:
        key = _key(message)
        if had[key]:
            had[key] -= 1
        elif key[0] in ("UndefinedName", "UndefinedExport") and key[1][0] in gone_public:
            continue
        elif key[0] == "UndefinedName" and renames:
            renames -= 1
        else:
            found.append(message)
    if not found:
        return Check(NAMES, True, detail="no new undefined or unused names")
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return Check(NAMES, False, detail=_said(found[0]) + more, output_tail="\n".join(_said(m) for m in found))


def _added_star(old: ast.Module, new: ast.Module) -> ast.ImportFrom | None:
    """The first `from m import *` the edit added (pyflakes cannot see the names it hides)."""
    had = Counter(n.module for n in ast.walk(old) if isinstance(n, ast.ImportFrom) and n.names[0].name == "*")
    for node in ast.walk(new):
        if isinstance(node, ast.ImportFrom) and node.names[0].name == "*":
            if had[node.module]:
                had[node.module] -= 1
            else:
                return node
    return None


def _kept_check(
    old: ast.Module,
    new: ast.Module,
    old_defs: dict,
    new_defs: dict,
    removed: list,
    instruction: str,
    codes: tuple[dict, dict],
    before: str,
) -> Check:
    """Definitions removed that the instruction does not ask to remove (asks_to_remove; a moved one is
    not removed); with a request that changes no behaviour, any statement removed or changed; otherwise
    a function that lost every `return`."""
    old_code, new_code = codes
    unasked = [
        d
        for d in removed
        if not asks_to_remove(instruction, _short_name(d), _unused_now(before, new, _short_name(d)))
        and not any(d.qualname.startswith(r.qualname + ".") for r in removed)
        and not _generated(d, new_defs)
    ]
    if unasked:
        first = unasked[0]
        more = f" (and {len(unasked) - 1} more)" if len(unasked) > 1 else ""
        return Check(
            KEPT,
            False,
            detail=f"removed `{first.qualname}` (line {first.line}), which the instruction "
            f"does not ask to remove{more}",
        )
    if not asks_for_behaviour(instruction):
        for qualname, d in old_defs.items():
            if qualname in new_defs and old_code[qualname] != new_code[qualname]:
                return Check(
                    KEPT,
                    False,
                    detail=f"changed the code of `{qualname}` (line {d.line}), but the "
                    "instruction asks only for documentation, type hints or logging",
                )
        lost = Counter(_module_code(old)) - Counter(_module_code(new))
        if lost:
            return Check(
                KEPT,
                False,
                detail=f"removed or changed `{_short(next(iter(lost)))}` at module level, "
                "which the instruction does not ask for",
            )
    for qualname, d in old_defs.items():
        if qualname in new_defs and _returns(d.node) and not _returns(new_defs[qualname].node):
            return Check(KEPT, False, detail=f"removed every `return` of `{qualname}` (line {d.line})")
    return Check(KEPT, True, detail="no definition or statement lost")


# Methods a class gets without writing them: a dataclass-like decorator writes these, and Python
# derives `__ne__` from `__eq__`; a rewrite into `@dataclass` removes them and loses nothing.
_GENERATED = frozenset({"__init__", "__repr__", "__eq__", "__ne__", "__hash__", "__lt__", "__le__", "__gt__", "__ge__"})
_DATACLASS_LIKE = frozenset({"dataclass", "define", "frozen", "mutable", "s", "attrs", "dataclass_transform"})


def _generated(removed: _Definition, new_defs: dict) -> bool:
    """Whether a removed method is one its class, still there, now gets generated (see _GENERATED)."""
    owner, _, name = removed.qualname.rpartition(".")
    cls = new_defs.get(owner)
    if name not in _GENERATED or cls is None or not isinstance(cls.node, ast.ClassDef):
        return False
    if name == "__ne__":
        return True
    for decorator in cls.node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        spelled = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if spelled in _DATACLASS_LIKE:
            return True
    return False


def _body_check(old_defs: dict, new_defs: dict, old_code: dict, new_code: dict) -> Check:
    """A function whose changed code is closer to another definition's code than to its own."""
    changed = [
        q
        for q, d in new_defs.items()
        if q in old_code and not isinstance(d.node, ast.ClassDef) and new_code[q] != old_code[q]
    ]
    kinds = {q: type(d.node) for q, d in old_defs.items()}
    copy = _copied(
        [(q, new_code[q], old_code[q]) for q in changed],
        {q: c for q, c in old_code.items() if c.strip()},
        lambda q, other: kinds[other] is type(new_defs[q].node),
    )
    if copy is None:
        return Check(BODY, True, detail="no body became another definition's")
    qualname, other = copy
    return Check(
        BODY,
        False,
        detail=f"the body of `{qualname}` (line {new_defs[qualname].line}) is now the code of "
        f"`{other}` (line {old_defs[other].line})",
    )


_PEERS = 32  # other definitions a changed one is compared with, at most
_RARE = 64  # a token in more definitions than this does not pick the peers
_PAIRS = 20_000  # comparisons for one candidate, at most


def _copied(
    changed: list[tuple[str, str, str]], others: dict[str, str], comparable: Callable[[str, str], bool]
) -> tuple[str, str] | None:
    """The first changed definition (name, new code, old code) whose new code is closer to another
    definition's old code (`others`, where `comparable`) than to its own, as (its name, the other's);
    None if none. Near-linear: each is compared with the definitions of the same code and the _PEERS
    that share most of its rarer tokens, within _PAIRS comparisons in all."""
    tokens = {q: code.split() for q, code in others.items()}
    same: dict[str, list[str]] = {}
    holders: dict[str, list[str]] = {}
    for q, code in others.items():
        same.setdefault(code, []).append(q)
        for token in set(tokens[q]):
            holders.setdefault(token, []).append(q)
    budget = _PAIRS
    for qualname, code, own_code in changed:
        shared: Counter = Counter()
        for token in set(code.split()):
            if len(holders.get(token, ())) <= _RARE:
                shared.update(holders.get(token, ()))
        peers = same.get(code, []) + [q for q, _ in shared.most_common(_PEERS)]
        own = _similarity(code, own_code)
        for other in dict.fromkeys(peers):
            if other == qualname or not comparable(qualname, other) or budget <= 0:
                continue
            budget -= 1
            alike = 1.0 if others[other] == code else _similarity(code, others[other])
            if alike >= _SIMILAR and alike > own:
                return qualname, other
    return None


def _public_check(path: str, new: ast.Module, gone: set[str], removed: list, new_defs: dict) -> Check:
    """A removed top-level name that `__all__` still lists or the module still uses; a removed method
    the module still calls as an attribute (`self._dict_to_list` after a rename of the method alone)."""
    kept_names = {q.rsplit(".", 1)[-1] for q in new_defs}
    for d in removed:
        name = d.qualname.rsplit(".", 1)[-1]
        if "." in d.qualname and name not in kept_names:
            use = next((n for n in ast.walk(new) if isinstance(n, ast.Attribute) and n.attr == name), None)
            if use is not None:
                return Check(
                    PUBLIC,
                    False,
                    detail=f"removed `{d.qualname}`, which the module still uses "
                    f"(`{ast.unparse(use)}`, line {use.lineno})",
                )
    if not gone:
        return Check(PUBLIC, True, detail="no public name removed")
    listed = _all_names(new)
    for name in sorted(gone):
        if name in listed:
            return Check(PUBLIC, False, detail=f"removed `{name}`, which `__all__` still lists")
    used = {m.message_args[0] for m in (_flakes(path, new) or []) if type(m).__name__ == "UndefinedName"}
    for name in sorted(gone & used):
        return Check(PUBLIC, False, detail=f"removed `{name}`, which the module still uses")
    return Check(PUBLIC, True, detail="no removed name still used")


_ASKS_DOCS = re.compile(r"\b(?:doc\s?strings?|document\w*)\b", re.I)
# "after the module docstring" names a place for new code (scope/insert.py), not a docstring to write.
_DOCSTRING_PLACE = re.compile(
    r"\b(?:after|below|beneath|under|following|before|above)\s+(?:the\s+|its\s+)?(?:module(?:'s)?\s+|file(?:'s)?\s+)?"
    r"doc\s?string\b",
    re.I,
)
_ASKS_HINTS = re.compile(r"\b(?:type\s+hints?|type\s+annotations?|annotat\w*|typing|typed)\b", re.I)
_ASKS_LOGGING = re.compile(r"\b(?:logging|log|logs|logger|debug\s+messages?)\b", re.I)


# "Delete the shorten function", "remove `join`": a definition named right after the verb, nothing after it.
_DELETE_NAMED = re.compile(
    r"\b(?:delete|remove|drop)\s+(?:the\s+)?(?:(?:function|method|class)\s+)?`?"
    r"(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)`?(?:\s*\(\))?(?:\s+(?:function|method|class))?\s*[.!]?\s*$",
    re.I,
)


# "Add a reset() method to C", "add a new function `parse_row`", "add the helper method reset_count": a
# definition the instruction names to be added.
_ADD_NAMED = re.compile(
    r"\badd\s+(?:a|an|the)?\s*(?:new\s+)?(?:(?:static|class|helper|private|public|test)\s+)?"
    r"(?:(?:method|function|class)\s+(?:called\s+|named\s+)?`?(?P<after>[A-Za-z_]\w*)`?(?:\(\))?"
    r"|`?(?P<before>[A-Za-z_]\w*)`?(?:\(\))?\s+(?:method|function|class)\b)",
    re.I,
)
_NOT_A_NAME = frozenset(
    "a an the new small simple helper static private public method function class that which to for in on "
    "of with and or so as at by from here there it its this test called named".split()
)


def _asked_check(
    old: ast.Module, new: ast.Module, instruction: str, same: bool, old_defs: dict, new_defs: dict
) -> tuple[Check, ...]:
    added = _ADD_NAMED.search(instruction)
    name = added and (added["after"] or added["before"])
    if name and name.lower() not in _NOT_A_NAME and not same:
        short = {q.rsplit(".", 1)[-1] for q in new_defs}
        if name not in short and name not in {q.rsplit(".", 1)[-1] for q in old_defs}:
            return (Check(ASKED, False, detail=f"defines no `{name}`, which the instruction asks to add"),)
    deleted = _DELETE_NAMED.search(instruction.strip())
    if deleted and not same:
        name = deleted["name"]
        wanted = [q for q in old_defs if q == name or q.rsplit(".", 1)[-1] == name]
        if wanted and all(q in new_defs for q in wanted):
            return (Check(ASKED, False, detail=f"keeps `{wanted[0]}`, which the instruction asks to delete"),)
        if wanted:
            return (Check(ASKED, True, detail=f"`{wanted[0]}` is deleted"),)
    if _ASKS_HINTS.search(instruction) and not same:
        hinted = _hint_without_none(old_defs, new_defs)
        if hinted is not None:
            return (hinted,)
    return _added_check(old, new, instruction, same)


_ALLOWS_NONE = re.compile(r"\b(?:Optional|None|Any|object)\b")


def _hint_without_none(old_defs: dict, new_defs: dict) -> Check | None:
    """A parameter whose default is None given a new type hint that does not allow None
    (`key: Callable = None`): a type checker refuses it; `Optional[Callable]` or `Callable | None`."""
    for qualname, d in new_defs.items():
        if not isinstance(d.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        old = old_defs.get(qualname)
        had = {a.arg: a.annotation and ast.dump(a.annotation) for a in _arguments(old.node)} if old else {}
        for arg, default in _defaults(d.node.args):
            hint = arg.annotation
            none = isinstance(default, ast.Constant) and default.value is None
            if not none or hint is None or had.get(arg.arg) == ast.dump(hint):
                continue
            text = ast.unparse(hint)
            if not _ALLOWS_NONE.search(text):
                return Check(
                    ASKED,
                    False,
                    detail=f"hints `{arg.arg}: {text}` in `{qualname}` (line {d.line}) although its default is "
                    f"None: write `Optional[{text}]` or `{text} | None`",
                )
    return None


def _arguments(node: ast.AST) -> list[ast.arg]:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    a = node.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs]


def _defaults(args: ast.arguments) -> list[tuple[ast.arg, ast.AST]]:
    """Each parameter that has a default, with it."""
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
    return pairs + [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]


def _added_check(old: ast.Module, new: ast.Module, instruction: str, same: bool) -> tuple[Check, ...]:
    """A request for documentation, type hints or logging only whose candidate adds none of what it
    asks for (a small model's answer that changed only whitespace, or logged with print); no check for
    other requests (a test decides what they ask), nor for a candidate that changed nothing (`same`:
    the change check's, and a hook rule's file may already comply)."""
    wanted = {
        "a docstring": (_ASKS_DOCS, _docstrings),
        "a type hint": (_ASKS_HINTS, _annotations),
        "a logging call": (_ASKS_LOGGING, _logging_calls),
    }
    request = _DOCSTRING_PLACE.sub(" ", instruction)
    asked = [(what, count) for what, (pattern, count) in wanted.items() if pattern.search(request)]
    if asks_for_behaviour(instruction) or not asked or same:
        return ()
    if any(
        count(new) - count(old) > 0 or (what == "a docstring" and _docstring_set(new) - _docstring_set(old))
        for what, count in asked
    ):
        return (Check(ASKED, True, detail="the asked-for addition is there"),)
    return (
        Check(
            ASKED,
            False,
            detail="adds no "
            + " or ".join(what.split(" ", 1)[1] for what, _ in asked)
            + ", which the instruction asks for",
        ),
    )


def _docstring_set(tree: ast.Module) -> set[str]:
    return {
        ast.get_docstring(n, clean=False)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    } - {None}


def _docstrings(tree: ast.Module) -> int:
    return len(_docstring_set(tree))


def _annotations(tree: ast.Module) -> int:
    return (
        sum(1 for n in ast.walk(tree) if isinstance(n, ast.arg) and n.annotation is not None)
        + sum(
            1
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns is not None
        )
        + sum(1 for n in ast.walk(tree) if isinstance(n, ast.AnnAssign))
    )


def _logging_calls(tree: ast.Module) -> int:
    return sum(
        1
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and _is_logging(n) and not (isinstance(n.func, ast.Name) and n.func.id == "print")
    )


def _top_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level: definitions, assignments, imports."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _gone_public(old: ast.Module, new: ast.Module) -> set[str]:
    return {n for n in _top_names(old) - _top_names(new) if not n.startswith("_") or n in _all_names(old)}


def _all_names(tree: ast.Module) -> set[str]:
    """The strings an `__all__ = [...]` (or `+=`) at top level lists."""
    names = set()
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return names


# -- code without documentation, annotations and logging ----------------------------------------


class _Plain(ast.NodeTransformer):
    """Strips what a documentation, type-hint or logging request may add: docstrings, annotations,
    imports, logging and print calls, `logger = logging.getLogger(...)`; nested definitions are
    compared on their own, so a definition keeps only its name here."""

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign(targets=[node.target], value=self.visit(node.value)), node)

    def visit_Import(self, node):
        return None

    visit_ImportFrom = visit_Import

    def visit_Expr(self, node: ast.Expr):
        if _is_logging(node.value):
            return None
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign):
        if _is_logging(node.value):
            return None
        return self.generic_visit(node)


def _is_logging(value: ast.AST) -> bool:
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Name):
        return func.id == "print"
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id in _LOGGERS


def _strip_docstring(body: list) -> list:
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1:]
    return body


def _code(node: ast.AST, docstring: bool = False) -> str:
    """A definition's own statements without documentation, annotations and logging, as text (nested
    definitions by their name and arguments only)."""
    node = copy.deepcopy(node)
    body = [_stub(s) for s in (node.body if docstring else _strip_docstring(node.body))]
    plain = _Plain()
    statements = [s for s in (plain.visit(s) for s in body) if s is not None]
    header = ""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node.returns = None
        header = ast.unparse(plain.visit(node.args))
    return header + "\n" + "\n".join(ast.unparse(s) for s in statements)


def _stub(statement: ast.stmt) -> ast.stmt:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return ast.Expr(ast.Constant(f"<definition {statement.name}>"))
    return statement


def _module_code(tree: ast.Module) -> list[str]:
    """The module's own statements (not definitions), each as text without documentation and logging."""
    plain = _Plain()
    found = []
    for statement in _strip_docstring(tree.body):
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        kept = plain.visit(copy.deepcopy(statement))
        if kept is not None and not _is_all(kept):
            found.append(ast.unparse(kept))
    return found


def _is_all(statement: ast.stmt) -> bool:
    targets = getattr(statement, "targets", None) or [getattr(statement, "target", None)]
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def _returns(node: ast.AST) -> bool:
    """Whether a function returns a value somewhere in its own body (not a nested definition's)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    todo = list(node.body)
    while todo:
        statement = todo.pop()
        if isinstance(statement, ast.Return) and statement.value is not None:
            return True
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(
                c
                for c in ast.iter_child_nodes(statement)
                if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case))
            )
    return False


def _similarity(a: str, b: str) -> float:
    x, y = a.split(), b.split()
    matcher = difflib.SequenceMatcher(None, x, y, autojunk=False)
    return matcher.ratio() if matcher.quick_ratio() >= _SIMILAR else 0.0


def _short(text: str) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= 60 else line[:60] + "…"


# -- JavaScript / TypeScript ---------------------------------------------------------------------


def _outline_checks(path: str, before: str, after: str, instruction: str, parser: str) -> tuple[Check, ...]:
    """Definitions removed and bodies copied, by the tree-sitter outline's definitions and their text;
    for JavaScript also names (cadedit.scope.js_names), not resolved for TypeScript."""

    old_doc, new_doc = Document.from_text(before, path), Document.from_text(after, path)
    old, new = outline(old_doc, parser), outline(new_doc, parser)
    if not (old.known and new.known):
        return ()
    old_text = {d.qualname: _span(old_doc, d) for d in old.definitions}
    new_text = {d.qualname: _span(new_doc, d) for d in new.definitions}
    old_line = {d.qualname: d.start for d in old.definitions}
    unasked = [
        q
        for q in old_text
        if q not in new_text
        and not _moved_text(q, old_text, new_text)
        and not asks_to_remove(instruction, q.rsplit(".", 1)[-1], _unexported(before, q, old_text[q]))
    ]
    kept = Check(KEPT, True, detail="no definition lost")
    if unasked:
        kept = Check(
            KEPT,
            False,
            detail=f"removed `{unasked[0]}` (line {old_line[unasked[0]]}), which the instruction "
            "does not ask to remove",
        )
    body = Check(BODY, True, detail="no body became another definition's")
    bodies = {q: _body_text(t) for q, t in old_text.items()}
    changed = [(q, _body_text(t), bodies[q]) for q, t in new_text.items() if q in bodies and _body_text(t) != bodies[q]]
    copy = _copied(changed, {q: b for q, b in bodies.items() if b.strip()}, lambda q, other: True)
    if copy is not None:
        qualname, other = copy
        body = Check(
            BODY, False, detail=f"the body of `{qualname}` is now the code of `{other}` (line {old_line[other]})"
        )
    if parser != JAVASCRIPT:
        return kept, body
    # Lines joined as the outline joins them: a line number means the same under CRLF or lone CR.
    return _js_names_check("\n".join(old_doc.display_lines()), "\n".join(new_doc.display_lines())), kept, body


def _js_names_check(before: str, after: str) -> Check:
    """Undefined names and unused locals the file did not have before. A name the file already used
    without defining it is a global of its platform (`$`, a test runner's `describe`, and then its
    `expect`); a new undefined name where such a name went is a rename of what was already undefined."""
    old, new = js_names(before), js_names(after)
    if isinstance(old, str) or isinstance(new, str):
        return Check(NAMES, True, True, f"names not checked: {new if isinstance(new, str) else old}")
    had = {f.name for f in old.undefined}
    known = had.union(*(group for group in GROUPS if group & had))
    renames = len(had - {f.name for f in new.undefined})
    forgiven = set(sorted({f.name for f in new.undefined} - known, key=_first_line(new.undefined))[:renames])
    found = [f for f in new.undefined if f.name not in known | forgiven]
    unused = Counter(f.name for f in old.unused)
    for f in new.unused:
        if unused[f.name]:
            unused[f.name] -= 1
        else:
            found.append(f)
    if not found:
        return Check(NAMES, True, detail="no new undefined or unused names")
    found.sort(key=lambda f: (f.line, f.column))
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return Check(NAMES, False, detail=found[0].said() + more, output_tail="\n".join(f.said() for f in found))


def _first_line(findings: tuple) -> Callable[[str], int]:
    lines: dict[str, int] = {}
    for f in findings:
        lines.setdefault(f.name, f.line)
    return lambda name: lines[name]


def _moved_text(qualname: str, old_text: dict, new_text: dict) -> bool:
    """Whether a JavaScript definition gone from its qualified name reappears under another one with
    its name and a body alike (a function moved into a class or an object)."""
    name = qualname.rsplit(".", 1)[-1]
    body = _body_text(old_text[qualname])
    return any(
        q.rsplit(".", 1)[-1] == name and _alike(body, _body_text(t)) for q, t in new_text.items() if q not in old_text
    )


def _unexported(before: str, qualname: str, text: str) -> bool:
    """Whether a JavaScript definition is private to its file: not `export`ed, named nowhere else."""
    name = qualname.rsplit(".", 1)[-1]
    return not text.lstrip().startswith("export") and unused_in(before, name, True)


def _span(document: Document, definition) -> str:
    return "\n".join(document.display_lines()[definition.start - 1 : definition.end])


def _body_text(text: str) -> str:
    """A definition's text after its first line, comments dropped."""
    lines = text.split("\n")[1:]
    return "\n".join(line for line in lines if not line.strip().startswith(("//", "*", "/*")))
