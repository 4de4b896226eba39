"""Renames and deletions of Python definitions without a model, exact, through libcst (a concrete
syntax tree: every byte not renamed or deleted is kept as it was, comments and blank lines included).

rename(text, old, new, what, within): a module-level function, class or variable (its definition,
every use that resolves to it, `global` statements, `__all__` entries), a method `Class.m` (its def and
every `self.m` / `cls.m` / `Class.m` / `super().m`, keyword arguments need no change), a parameter of a
function (its uses, the keyword arguments of calls of that function in the module) or a local; each
with the docstrings and comments in its reach that name it. delete(text, targets, helpers): module-level
functions, classes or variables and methods, their `__all__` entries, and with `helpers` the private
module-level functions only they used.

Where the edit cannot be known to be exact (the name is not found or is ambiguous, the new name is
taken, a string names it as getattr would read it, the module calls eval, exec, globals() or vars(), a
deleted definition is still used), NotMechanicalError says why. Pure: no model, no torch."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, ScopeProvider

from cadedit.errors import NotMechanicalError

_DYNAMIC = ("eval", "exec", "globals", "vars", "locals", "__import__")


@dataclass(frozen=True)
class Refactored:
    """The edited text and how many places changed (names renamed, definitions deleted)."""

    text: str
    places: int
    note: str


class _Tree:
    """The module's tree and what libcst's metadata says about it."""

    def __init__(self, text: str):
        try:
            # The module was parsed here: the wrapper need not copy it.
            self.wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
        except (cst.ParserSyntaxError, RecursionError) as exc:
            raise NotMechanicalError(f"the file does not parse as Python here ({str(exc).splitlines()[0]})") from None
        self.module = self.wrapper.module
        self.scopes = self.wrapper.resolve(ScopeProvider)
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.nodes = list(_walk(self.module, self.parents))
        self._positions = None  # line numbers, for messages only: resolved when one is asked for

    def line(self, node: cst.CSTNode) -> int:
        if self._positions is None:
            self._positions = self.wrapper.resolve(PositionProvider)
        return self._positions[node].start.line

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def inside(self, node: cst.CSTNode, ancestor: cst.CSTNode) -> bool:
        while node is not None:
            if node is ancestor:
                return True
            node = self.parents.get(node)
        return False


def _walk(node: cst.CSTNode, parents: dict | None = None):
    """The node and every node under it, depth first; `parents` gets each one's parent."""
    yield node
    for child in node.children:
        if parents is not None:
            parents[child] = node
        yield from _walk(child, parents)


# -- what names where ------------------------------------------------------------------------------


def _definition(tree: _Tree, body, name: str):
    """The one def or class of `body` (a list of statements) named `name`, or None."""
    found = [s for s in body if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s.name.value == name]
    if len(found) > 1:
        raise NotMechanicalError(
            f"{name} is defined {len(found)} times (lines {', '.join(str(tree.line(f)) for f in found)})"
        )
    return found[0] if found else None


def _classes(tree: _Tree) -> list[cst.ClassDef]:
    return [n for n in tree.nodes if isinstance(n, cst.ClassDef)]


def _method(tree: _Tree, qualified: str) -> tuple[cst.ClassDef, cst.FunctionDef]:
    """The class and method `Class.m` (or `m`, when exactly one class of the module defines it)."""
    if "." in qualified:
        owner, name = qualified.split(".", 1)
        classes = [c for c in _classes(tree) if c.name.value == owner]
        if len(classes) != 1:
            raise NotMechanicalError(
                f"no class {owner} in the file" if not classes else f"{len(classes)} classes are named {owner}"
            )
        method = _definition(tree, classes[0].body.body, name)
        if not isinstance(method, cst.FunctionDef):
            raise NotMechanicalError(f"class {owner} defines no method {name}")
        return classes[0], method
    owners = [
        (c, d) for c in _classes(tree) if isinstance(d := _definition(tree, c.body.body, qualified), cst.FunctionDef)
    ]
    if len(owners) != 1:
        raise NotMechanicalError(
            f"no definition named {qualified} in the file"
            if not owners
            else f"{qualified} is a method of {', '.join(c.name.value for c, _ in owners)}: say which (Class.{qualified})"
        )
    return owners[0]


def _function(tree: _Tree, qualified: str) -> cst.FunctionDef:
    """The module-level function `f`, or the method `Class.m`."""
    if "." in qualified:
        return _method(tree, qualified)[1]
    found = _definition(tree, tree.module.body, qualified)
    if isinstance(found, cst.FunctionDef):
        return found
    if found is None:
        try:
            return _method(tree, qualified)[1]
        except NotMechanicalError:
            pass
    raise NotMechanicalError(f"no function named {qualified} in the file")


def _strings_naming(tree: _Tree, name: str, skip=()) -> list[int]:
    """Lines of string literals (not docstrings, not `skip`) whose whole value is `name`: what getattr,
    setattr, hasattr or a table of names would read."""
    docstrings = _docstrings(tree)
    lines = []
    for node in tree.nodes:
        if isinstance(node, cst.SimpleString) and node not in skip and id(node) not in docstrings:
            try:
                value = node.evaluated_value
            except Exception:  # an odd escape: not a name either way
                continue
            if value == name:
                lines.append(tree.line(node))
    return lines


def _dynamic_calls(tree: _Tree, within: cst.CSTNode | None = None) -> list[tuple[str, int]]:
    """(name, line) of each call of eval, exec, globals(), vars(), locals() or __import__ (in `within`)."""
    return [
        (n.func.value, tree.line(n))
        for n in tree.nodes
        if isinstance(n, cst.Call)
        and isinstance(n.func, cst.Name)
        and n.func.value in _DYNAMIC
        and (within is None or tree.inside(n, within))
    ]


def _refuse_dynamic(tree: _Tree, name: str, within: cst.CSTNode | None = None, skip=()) -> None:
    """NotMechanicalError where code may reach `name` other than by its name: a string naming it, a call
    of eval and the like, and for a module-level name (no `within`) a star import that may bind it too."""
    stars = [n for n in tree.nodes if isinstance(n, cst.ImportFrom) and isinstance(n.names, cst.ImportStar)]
    if stars and within is None:
        source = tree.code(stars[0].module) if stars[0].module is not None else "."
        raise NotMechanicalError(f"`from {source} import *` at line {tree.line(stars[0])} may bind {name} too")
    lines = _strings_naming(tree, name, skip)
    if lines:
        raise NotMechanicalError(f"a string names {name} at line {lines[0]} (a dynamic use, as getattr reads it)")
    calls = _dynamic_calls(tree, within)
    if calls:
        raise NotMechanicalError(
            f"the code calls {calls[0][0]}() at line {calls[0][1]}, which may use {name} by its name"
        )


def _all_entries(tree: _Tree, name: str) -> list[cst.SimpleString]:
    """The string elements of `__all__` (assigned, added to, appended or extended) whose value is `name`."""
    found = []
    for node in tree.nodes:
        target = None
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target, value = node.targets[0].target, node.value
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            target, value = node.target, node.value
        elif (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in ("append", "extend")
        ):
            target, value = node.func.value, node.args[0].value if node.args else None
        if not (isinstance(target, cst.Name) and target.value == "__all__") or value is None:
            continue
        elements = [value] if isinstance(value, cst.SimpleString) else getattr(value, "elements", [])
        for element in elements:
            string = getattr(element, "value", element)
            if isinstance(string, cst.SimpleString) and string.evaluated_value == name:
                found.append(string)
    return found


def _docstrings(tree: _Tree) -> set[int]:
    """ids of the docstring nodes (the first statement string of the module, a class or a function)."""
    found = set()
    for node in tree.nodes:
        if isinstance(node, (cst.Module, cst.ClassDef, cst.FunctionDef)):
            body = node.body if isinstance(node, cst.Module) else node.body.body
            if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr):
                value = body[0].body[0].value
                if isinstance(value, cst.SimpleString):
                    found.add(id(value))
    return found


def _distinctive(name: str) -> bool:
    """A name no prose uses as a word: with an underscore inside, a digit or a capital."""
    return "_" in name.strip("_") or any(c.isdigit() or c.isupper() for c in name) or name.startswith("_")


def mention_pattern(name: str) -> re.Pattern:
    """Where prose (a docstring, a comment) names `name`: as a word for a distinctive name, else only
    as code (`name`, name(), x.name) so that "read" in a sentence stays when read() is renamed."""
    word = re.escape(name)
    if _distinctive(name):
        return re.compile(rf"(?<![\w$]){word}(?![\w$])")
    return re.compile(rf"(?<=`){word}(?=`)|(?<![\w$.]){word}(?=\()|(?<=\w\.){word}(?![\w$])")


# -- renames ---------------------------------------------------------------------------------------


class _Renamer(cst.CSTTransformer):
    """Renames the Name nodes `names` (by identity), the `strings` (`__all__` entries) and the mentions
    in docstrings and comments inside `reach` (None: the whole module)."""

    def __init__(self, tree: _Tree, names, strings, old: str, new: str, reach=None):
        super().__init__()
        self.tree, self.names, self.strings = tree, {id(n) for n in names}, {id(s) for s in strings}
        self.old, self.new, self.reach = old, new, reach
        self.docstrings = _docstrings(tree)
        self.pattern = mention_pattern(old)
        self.places = 0
        self.depth = 0 if reach is not None else 1

    def on_visit(self, node):
        if node is self.reach:
            self.depth += 1
        return super().on_visit(node)

    def on_leave(self, original, updated):
        result = super().on_leave(original, updated)
        if original is self.reach:
            self.depth -= 1
        return result

    def leave_Name(self, original, updated):
        if id(original) in self.names:
            self.places += 1
            return updated.with_changes(value=self.new)
        return updated

    def leave_SimpleString(self, original, updated):
        if id(original) in self.strings:
            self.places += 1
            quote = updated.quote
            return updated.with_changes(value=updated.prefix + quote + self.new + quote)
        if id(original) in self.docstrings and self.depth > 0:
            return updated.with_changes(value=self._prose(updated.value))
        return updated

    def leave_Comment(self, original, updated):
        return updated.with_changes(value=self._prose(updated.value)) if self.depth > 0 else updated

    def _prose(self, text: str) -> str:
        changed, count = self.pattern.subn(self.new, text)
        self.places += count
        return changed


def _taken(tree: _Tree, new: str, within: cst.CSTNode | None = None) -> int | None:
    """The line of a name `new` already in use (not as an attribute or keyword argument), or None."""
    for node in tree.nodes:
        if isinstance(node, cst.Name) and node.value == new and (within is None or tree.inside(node, within)):
            parent = tree.parents.get(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue
            if isinstance(parent, cst.Arg) and parent.keyword is node:
                continue
            return tree.line(node)
    return None


def _binding_names(tree: _Tree, assignments, what: str) -> list[cst.Name]:
    """The Name nodes that bind a name: a def's or class's name, a parameter's, an assigned Name."""
    names = []
    for assignment in assignments:
        node = getattr(assignment, "node", None)
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            names.append(node.name)
        elif isinstance(node, cst.Param):
            names.append(node.name)
        elif isinstance(node, cst.Name):
            names.append(node)
        else:
            kind = type(node).__name__.lower() if node is not None else "builtin"
            raise NotMechanicalError(
                f"{what} is bound by an {kind} here (line {tree.line(node)})"
                if node is not None
                else f"{what} is a builtin"
            )
    return names


def _uses(tree: _Tree, assignments, what: str) -> list[cst.Name]:
    """The Name nodes that read the assignments (every access that resolves to them)."""
    names = []
    for assignment in assignments:
        for access in assignment.references:
            node = access.node
            if not isinstance(node, cst.Name):
                raise NotMechanicalError(f"{what} is used at line {tree.line(node)} in a form renamed by hand only")
            names.append(node)
    return names


def rename(text: str, old: str, new: str, what: str = "", within: str = "") -> Refactored:
    """The file with `old` renamed to `new` (the module docstring says what is renamed where)."""
    if not new.isidentifier():
        raise NotMechanicalError(f"{new!r} is not a Python name")
    tree = _Tree(text)
    if within or what in ("parameter", "local"):
        return _rename_local(tree, old, new, what, within)
    if "." in old or what == "method":
        return _rename_method(tree, old, new)
    if old not in tree.scopes[tree.module].assignments:
        try:
            _method(tree, old)
        except NotMechanicalError:
            raise NotMechanicalError(f"no definition named {old} in the file") from None
        return _rename_method(tree, old, new)
    return _rename_global(tree, old, new)


def _rename_global(tree: _Tree, old: str, new: str) -> Refactored:
    scope = tree.scopes[tree.module]
    assignments = list(scope.assignments[old])
    entries = _all_entries(tree, old)
    _refuse_dynamic(tree, old, skip=entries)
    if (line := _taken(tree, new)) is not None:
        raise NotMechanicalError(f"{new} is already a name in the file (line {line})")
    names = _binding_names(tree, assignments, old) + _uses(tree, assignments, old)
    names += [item.name for n in tree.nodes if isinstance(n, cst.Global) for item in n.names if item.name.value == old]
    return _renamed(tree, names, entries, old, new, None, f"renamed {old} to {new}")


def _renamed(tree: _Tree, names, strings, old: str, new: str, reach, note: str) -> Refactored:
    renamer = _Renamer(tree, names, strings, old, new, reach)
    module = tree.module.visit(renamer)
    return Refactored(module.code, renamer.places, f"{note} ({renamer.places} places)")


def _rename_method(tree: _Tree, old: str, new: str) -> Refactored:
    cls, method = _method(tree, old)
    name = method.name.value
    if name.startswith("__") and name.endswith("__"):
        raise NotMechanicalError(f"{name} is a special method: Python calls it by its name")
    owner = cls.name.value
    _refuse_dynamic(tree, name, within=cls)
    others = [c.name.value for c in _classes(tree) if c is not cls and _definition(tree, c.body.body, name) is not None]
    if others:
        raise NotMechanicalError(f"{', '.join(others)} also define {name}: which uses mean {owner}'s is not known")
    subclasses = {owner} | {c.name.value for c in _classes(tree) if _derives(c, owner)}
    if new in tree.scopes[method].assignments or any(
        isinstance(n, cst.Attribute) and n.attr.value == new and _receiver_is(tree, n.value, subclasses)
        for n in tree.nodes
    ):
        raise NotMechanicalError(f"class {owner} already has {new}")
    # The def's name, and the names in the class body that read it (a table of methods: `same=phase3`).
    names = [method.name] + _uses(tree, tree.scopes[method].assignments[name], name)
    for node in tree.nodes:
        if isinstance(node, cst.Attribute) and node.attr.value == name:
            if not _receiver_is(tree, node.value, subclasses):
                raise NotMechanicalError(
                    f"`{tree.code(node)}` at line {tree.line(node)} may name another {name} than {owner}.{name}'s"
                )
            names.append(node.attr)
    note = f"renamed {owner}.{name} to {owner}.{new}"
    return _renamed(tree, names, [], name, new, None, note)


def _derives(cls: cst.ClassDef, owner: str) -> bool:
    return any(isinstance(base.value, cst.Name) and base.value.value == owner for base in cls.bases)


def _receiver_is(tree: _Tree, value: cst.BaseExpression, classes: set[str]) -> bool:
    """Whether `value.m` surely reads the method of one of `classes`: self or cls inside one of them,
    the class itself, super(), an instance made in place (`Class(...).m`) or a name only ever bound to
    one (`x = Class(...)`, a parameter `x: Class`)."""
    if isinstance(value, cst.Name) and value.value in classes:
        return True
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in classes | {"super"}:
        return True
    if isinstance(value, cst.Name) and value.value in ("self", "cls"):
        node = tree.parents.get(value)
        while node is not None and not isinstance(node, cst.ClassDef):
            node = tree.parents.get(node)
        return node is not None and node.name.value in classes
    if isinstance(value, cst.Name) and (scope := tree.scopes.get(value)) is not None:
        assignments = scope[value.value]
        return bool(assignments) and all(_made_as(tree, a.node, classes) for a in assignments)
    return False


def _made_as(tree: _Tree, node, classes: set[str]) -> bool:
    """Whether a name is bound to an instance of one of `classes`: `x = Class(...)`, or `x: Class` as a
    parameter."""
    if isinstance(node, cst.Param):
        annotation = node.annotation.annotation if node.annotation is not None else None
        return isinstance(annotation, cst.Name) and annotation.value in classes
    target = tree.parents.get(node)
    assign = tree.parents.get(target) if isinstance(target, cst.AssignTarget) else None
    if not isinstance(assign, cst.Assign) or target.target is not node:
        return False
    call = assign.value
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value in classes


def _rename_local(tree: _Tree, old: str, new: str, what: str, within: str) -> Refactored:
    function = _function(tree, within)
    scope = tree.scopes[function.body.body[0]]
    assignments = list(scope.assignments[old]) if old in scope.assignments else []
    if not assignments:
        raise NotMechanicalError(f"{within} has no {'parameter' if what == 'parameter' else 'local'} named {old}")
    params = [a.node for a in assignments if isinstance(a.node, cst.Param)]
    if what == "parameter" and not params:
        raise NotMechanicalError(f"{within} has no parameter named {old} (a local is: say `local {old}`)")
    if any(
        isinstance(n, (cst.Global, cst.Nonlocal)) and any(i.name.value == old for i in n.names) for n in _walk(function)
    ):
        raise NotMechanicalError(f"{within} declares {old} global or nonlocal: it is not {within}'s own")
    strings = _strings_naming(tree, old) if params else []  # a parameter is named in a `**{"old": ...}` too
    if strings:
        raise NotMechanicalError(f"a string names {old} at line {strings[0]} (a keyword passed by its name?)")
    if _dynamic_calls(tree, function):
        name, line = _dynamic_calls(tree, function)[0]
        raise NotMechanicalError(f"{within} calls {name}() at line {line}, which may read {old} by its name")
    if (line := _taken(tree, new, function)) is not None:
        raise NotMechanicalError(f"{new} is already a name in {within} (line {line})")
    names = _binding_names(tree, assignments, old) + _uses(tree, assignments, old)
    if params:
        names += _keywords(tree, function, old)
    kind = "parameter" if params else "local"
    return _renamed(tree, names, [], old, new, function, f"renamed the {kind} {old} of {within} to {new}")


def _keywords(tree: _Tree, function: cst.FunctionDef, old: str) -> list[cst.Name]:
    """The keywords `old=` of the module's calls of the function (by its name, or `.name` for a method)."""
    name = function.name.value
    method = not any(s is function for s in tree.module.body)
    found = []
    for node in tree.nodes:
        if not isinstance(node, cst.Call):
            continue
        callee = node.func
        calls = (isinstance(callee, cst.Name) and callee.value == name and not method) or (
            method and isinstance(callee, cst.Attribute) and callee.attr.value == name
        )
        if calls:
            found += [arg.keyword for arg in node.args if arg.keyword is not None and arg.keyword.value == old]
    return found


# -- deletions -------------------------------------------------------------------------------------


def delete(text: str, targets: tuple[str, ...], helpers: bool = False) -> Refactored:
    """The file without the definitions `targets` (`f`, `Class.m`) and their `__all__` entries; with
    `helpers`, without the private module-level functions that only they used either."""
    tree = _Tree(text)
    doomed = [_doomed(tree, target) for target in targets]
    if helpers:
        doomed += _helpers(tree, doomed)
    entries = []
    for statement, name, owner in doomed:
        listed = _all_entries(tree, name) if owner is None else []
        _refuse_dynamic(tree, name.rsplit(".", 1)[-1], within=owner, skip=listed)
        entries += listed
        _refuse_used(tree, statement, name, [s for s, _, _ in doomed])
    module = tree.module.visit(_Deleter({id(s) for s, _, _ in doomed}, {id(e) for e in entries}))
    names = ", ".join(name for _, name, _ in doomed)
    listed = f" and {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} of __all__" if entries else ""
    return Refactored(module.code, len(doomed), f"deleted {names}{listed}")


def _doomed(tree: _Tree, target: str):
    """(statement, name, its class or None) of a definition to delete."""
    if "." in target:
        cls, method = _method(tree, target)
        return method, target, cls
    statement = _definition(tree, tree.module.body, target)
    if statement is None:
        statement = _assigned(tree, target)
    if statement is None:
        try:
            cls, method = _method(tree, target)
        except NotMechanicalError:
            raise NotMechanicalError(f"no definition named {target} at the top of the file") from None
        return method, f"{cls.name.value}.{target}", cls
    return statement, target, None


def _assigned(tree: _Tree, name: str):
    """The one module-level statement `name = ...` (or `name: T = ...`), or None."""
    found = []
    for statement in tree.module.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            targets = (
                [t.target for t in small.targets]
                if isinstance(small, cst.Assign)
                else [small.target]
                if isinstance(small, cst.AnnAssign)
                else []
            )
            if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                found.append(statement)
    if len(found) > 1:
        raise NotMechanicalError(f"{name} is assigned {len(found)} times at the top of the file")
    return found[0] if found else None


def _refuse_used(tree: _Tree, statement, name: str, doomed) -> None:
    """NotMechanicalError when code outside the deleted definitions still uses `name`."""
    if "." in name:
        attr = name.split(".", 1)[1]
        uses = [n for n in tree.nodes if isinstance(n, cst.Attribute) and n.attr.value == attr]
    else:
        scope = tree.scopes[tree.module]
        uses = [access.node for a in scope.assignments[name] for access in a.references]
    for use in uses:
        if not any(tree.inside(use, d) for d in doomed):
            raise NotMechanicalError(f"{name} is still used at line {tree.line(use)}")


def _helpers(tree: _Tree, doomed) -> list:
    """Private module-level functions that only the doomed definitions (and each other) use."""
    scope = tree.scopes[tree.module]
    gone = [s for s, _, _ in doomed]
    found = []
    changed = True
    while changed:
        changed = False
        for statement in tree.module.body:
            if (
                not isinstance(statement, cst.FunctionDef)
                or statement in gone
                or not statement.name.value.startswith("_")
            ):
                continue
            name = statement.name.value
            uses = [access.node for a in scope.assignments[name] for access in a.references]
            if uses and all(any(tree.inside(u, d) for d in gone) for u in uses) and not _strings_naming(tree, name):
                gone.append(statement)
                found.append((statement, name, None))
                changed = True
    return found


class _Deleter(cst.CSTTransformer):
    """Takes the doomed statements out of their bodies, with the comment lines right above each; a
    comment block set apart from it by a blank line stays, before the next statement."""

    def __init__(self, doomed: set[int], entries: set[int]):
        super().__init__()
        self.doomed, self.entries = doomed, entries

    def leave_Module(self, original, updated):
        body, kept_lines = self._without(updated.body, original.body)
        return updated.with_changes(body=body, footer=list(kept_lines) + list(updated.footer))

    def leave_IndentedBlock(self, original, updated):
        body, kept_lines = self._without(updated.body, original.body)
        if not body:
            body = [cst.SimpleStatementLine([cst.Pass()])]
        return updated.with_changes(body=body, footer=list(kept_lines) + list(updated.footer))

    def _without(self, body, original_body):
        out, carried = [], []
        for statement, original in zip(body, original_body):
            if id(original) in self.doomed:
                lines = list(statement.leading_lines)
                while lines and lines[-1].comment is not None:
                    lines.pop()
                while lines and lines[-1].comment is None:
                    lines.pop()
                carried += lines
                continue
            if carried:
                statement = statement.with_changes(leading_lines=carried + list(statement.leading_lines))
                carried = []
            out.append(statement)
        return out, carried

    def leave_List(self, original, updated):
        return self._elements(original, updated)

    def leave_Tuple(self, original, updated):
        return self._elements(original, updated)

    def _elements(self, original, updated):
        keep = [(o, u) for o, u in zip(original.elements, updated.elements) if id(o.value) not in self.entries]
        if len(keep) == len(updated.elements):
            return updated
        elements = [u for _, u in keep]
        last = updated.elements[-1]
        if elements and id(original.elements[-1].value) in self.entries:
            elements[-1] = elements[-1].with_changes(comma=last.comma)
        return updated.with_changes(elements=elements)
