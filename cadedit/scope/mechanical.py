"""Instructions that are a mechanical edit, read into an Intent: a named deletion ("Delete the function
X", "remove class C", "drop method m from C") or a rename ("Rename f to g", "rename the method C.m to
n", "rename the parameter s to seconds in f", "rename local x in f to y"). Such an edit needs no model:
cadedit.text.refactor does it exactly (docs/usage.md, "Renames and deletions without a model").

An instruction that asks for anything more ("Delete f and add g", "rename f to g and fix its bug") is
no Intent: the model does it. Pure: regular expressions over the instruction only."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

DELETE, RENAME = "delete", "rename"


@dataclass(frozen=True)
class Intent:
    """What a mechanical instruction asks: delete `targets`, or rename `old` to `new`.

    targets and old are a definition's name or `Class.method`; `what` is the kind the instruction
    named ("function", "class", "method", "parameter", "local", or "" for any) and `within` the
    function (or `Class.method`) a parameter or local belongs to. `helpers`: a deletion that also asks
    to delete the private helpers it leaves unused."""

    kind: str
    targets: tuple[str, ...] = ()
    old: str = ""
    new: str = ""
    what: str = ""
    within: str = ""
    helpers: bool = False

    def describe(self) -> str:
        if self.kind == DELETE:
            return "delete " + ", ".join(self.targets) + (" and the helpers it leaves unused" if self.helpers else "")
        where = f" in {self.within}" if self.within else ""
        return f"rename {self.what + ' ' if self.what else ''}{self.old} to {self.new}{where}"


_NAME = r"`?(?:[A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)?(?:\(\))?`?"
_KINDS = {
    "function": "function",
    "functions": "function",
    "func": "function",
    "def": "function",
    "method": "method",
    "methods": "method",
    "class": "class",
    "classes": "class",
    "constant": "variable",
    "variable": "variable",
    "global": "variable",
    "parameter": "parameter",
    "param": "parameter",
    "argument": "parameter",
    "arg": "parameter",
    "local": "local",
}
_KIND = r"(?:functions?|func|def|methods?|class(?:es)?|constant|variable|global)"
_OPEN = r"^\s*(?:please\s+)?"
_THE = r"(?:the\s+)?"
_OLDISH = r"(?:(?:unused|dead|old|obsolete|deprecated|legacy)\s+)?"
_HELPERS = (
    r"(?P<helpers>\s*,?\s*(?:and|with|together\s+with|along\s+with|plus)\s+(?:its|their|the)\s+"
    r"(?:now[-\s]+)?(?:unused\s+)?(?:private\s+)?helpers?(?:\s+functions?)?"
    r"(?:\s+(?:that|which)\s+(?:become|becomes|are|is)\s+(?:now\s+)?unused)?)?"
)
# What may follow the edit itself: nothing, or a remark after a stop ("; nothing uses it any more").
_TAIL = r"(?P<tail>(?:\s*[;.,:!(\u2014\u2013-].*)?)\s*$"
_MORE = re.compile(
    r"\b(?:add\w*|insert\w*|chang\w*|fix\w*|renam\w*|mov\w*|replac\w*|make|update\w*|writ\w*|implement\w*|"
    r"convert\w*|also|then|creat\w*|instead|keep\w*|delet\w*|remov\w*|drop\w*|refactor\w*|inline\w*|merg\w*|"
    r"split\w*|document\w*|docstring|test\w*|rewrit\w*|but)\b",
    re.I,
)
_DELETION = re.compile(
    _OPEN + r"(?:delete|remove|drop|erase|get\s+rid\s+of)\s+" + _THE + _OLDISH + rf"(?:(?P<kind>{_KIND})\s+)?"
    rf"(?P<names>{_NAME}(?:\s*(?:,\s*(?:and\s+)?|\s+and\s+){_NAME})*)"
    rf"(?:\s+(?P<kind_after>{_KIND}))?"
    rf"(?:\s+(?:from|in|of)\s+{_THE}(?:class\s+)?(?P<owner>{_NAME})(?:\s+class)?)?" + _HELPERS + _TAIL,
    re.I,
)
_TO = r"\s+(?:to|as|into)\s+"
_PARAM = r"(?:parameter|param|argument|arg|keyword\s+argument)"
_IN = rf"\s+(?:of|in)\s+{_THE}(?:(?:function|method)\s+)?(?P<within>{_NAME})"
_RENAMES = (
    # the parameter s of f to seconds / the parameter s to seconds in f
    re.compile(
        _OPEN + rf"rename\s+{_THE}(?P<what>{_PARAM})\s+(?P<old>{_NAME}){_IN}{_TO}(?P<new>{_NAME})" + _TAIL, re.I
    ),
    re.compile(
        _OPEN + rf"rename\s+{_THE}(?P<what>{_PARAM})\s+(?P<old>{_NAME}){_TO}(?P<new>{_NAME}){_IN}" + _TAIL, re.I
    ),
    # local x in f to y / local x to y in f / x to y in f
    re.compile(
        _OPEN + rf"rename\s+{_THE}(?P<what>local)(?:\s+variable)?\s+(?P<old>{_NAME}){_IN}{_TO}(?P<new>{_NAME})" + _TAIL,
        re.I,
    ),
    re.compile(
        _OPEN
        + rf"rename\s+{_THE}(?:(?P<what>local)(?:\s+variable)?\s+|variable\s+)?(?P<old>{_NAME}){_TO}(?P<new>{_NAME}){_IN}"
        + _TAIL,
        re.I,
    ),
    # the method m of C to n / the method m to n in C
    re.compile(
        _OPEN + rf"rename\s+{_THE}(?P<what>method)\s+(?P<old>{_NAME})\s+(?:of|in)\s+{_THE}(?:class\s+)?"
        rf"(?P<owner>{_NAME}){_TO}(?P<new>{_NAME})" + _TAIL,
        re.I,
    ),
    # the method C.m to n, the function f to g, f to g
    re.compile(
        _OPEN + rf"rename\s+{_THE}(?:(?P<what>{_KIND})\s+)?(?P<old>{_NAME}){_TO}(?:{_THE}(?:{_KIND}\s+))?"
        rf"(?P<new>{_NAME})" + _TAIL,
        re.I,
    ),
)


# Remarks that ask for what a mechanical rename does anyway: stripped before the instruction is read.
_ANYWAY = re.compile(
    r"\s*(?:,\s*|\s+and\s+|;\s*)?(?:(?:update|fix|change|rename)\s+)?(?:all\s+)?(?:its\s+|the\s+|their\s+)?"
    r"(?:callers|call\s+sites|uses|usages|references)(?!\s+(?:of|in|to|from|for)\b)(?:\s+(?:too|as\s+well))?|"
    r"\s+(?:everywhere|throughout\s+the\s+(?:file|module)|across\s+the\s+(?:file|module)|in\s+the\s+(?:whole\s+)?"
    r"(?:file|module))\b",
    re.I,
)


def read_intent(instruction: str) -> Intent | None:
    """The mechanical edit the instruction asks for, or None (the model does it)."""
    text = _ANYWAY.sub("", " ".join(instruction.split()))
    deletion = _DELETION.match(text)
    if deletion is not None and _only(deletion):
        return _deletion(deletion)
    for pattern in _RENAMES:
        found = pattern.match(text)
        if found is not None and _only(found):
            return _rename(found)
    return None


def _only(found: re.Match) -> bool:
    """Whether the remark after the edit asks for nothing more."""
    return not _MORE.search(found.group("tail"))


def _bare(name: str) -> str:
    return name.strip("`").removesuffix("()")


def _deletion(found: re.Match) -> Intent | None:
    names = [_bare(n) for n in re.split(r"\s*,\s*(?:and\s+)?|\s+and\s+", found.group("names"))]
    owner = _bare(found.group("owner") or "")
    if owner:
        if any("." in n for n in names) or "." in owner:
            return None
        names = [f"{owner}.{n}" for n in names]
    if any(keyword.iskeyword(part) for n in names for part in n.split(".")):
        return None
    what = _KINDS.get((found.group("kind") or found.group("kind_after") or "").lower(), "")
    if owner and what not in ("", "method", "function"):
        return None
    return Intent(DELETE, targets=tuple(names), what="method" if owner else what, helpers=bool(found.group("helpers")))


def _rename(found: re.Match) -> Intent | None:
    groups = found.groupdict()
    old, new = _bare(groups["old"]), _bare(groups["new"])
    what = _KINDS.get((groups.get("what") or "").split()[0].lower(), "") if groups.get("what") else ""
    within = _bare(groups.get("within") or "")
    owner = _bare(groups.get("owner") or "")
    if owner:
        old, what = f"{owner}.{old}", "method"
    if "." in old and "." in new:  # "rename C.m to C.n"
        if old.split(".")[0] != new.split(".")[0]:
            return None
        new = new.split(".", 1)[1]
    if (
        "." in new
        or not new.isidentifier()
        or keyword.iskeyword(new)
        or any(keyword.iskeyword(p) for p in old.split("."))
    ):
        return None
    if within and what not in ("parameter", "local"):
        what = "local"
    if what in ("parameter", "local") and not within:
        return None
    return Intent(RENAME, old=old, new=new, what=what, within=within)
