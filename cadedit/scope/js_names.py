"""Names in JavaScript: the names a file uses without defining them, and the local variables it
defines without ever reading them, from the tree-sitter tree outline.py parses (scopes resolved here).

Contract: js_names(source) returns a JsNames (undefined names and unused locals, each a Finding with
its line), or a problem string when the names cannot be known (tree-sitter missing, the text does not
parse). Scopes follow the language: `var` and function declarations belong to the enclosing function,
`let`/`const`/`class` to their block; parameters, catch parameters, loop bindings, imports and
destructuring bind; `a.b` uses only `a`, `{a}` uses `a`, labels and property names are no names.
The platform's globals (ECMAScript, Node, the browser) and those a `/* global a, b */` comment
declares (ESLint's convention) are defined; a name under `typeof` is never undefined. Unused counts
only `let`/`const`/`var` bindings inside a function or block, never parameters, destructured names,
loop or catch bindings, imports, module-level names or names starting with `_`. Pure: no torch, no transformers; never raises for bad file content.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from cadedit.scope.outline import JAVASCRIPT, tree_sitter_root

# Defined on every platform JavaScript runs on: ECMAScript's globals, Node's, the browser's common ones.
ECMASCRIPT = frozenset(
    """
AggregateError Array ArrayBuffer Atomics BigInt BigInt64Array BigUint64Array Boolean DataView Date
Error EvalError FinalizationRegistry Float32Array Float64Array Function Infinity Int16Array Int32Array
Int8Array Intl Iterator JSON Map Math NaN Number Object Promise Proxy RangeError ReferenceError Reflect
RegExp Set SharedArrayBuffer String Symbol SyntaxError TypeError URIError Uint16Array Uint32Array
Uint8Array Uint8ClampedArray WeakMap WeakRef WeakSet WebAssembly arguments decodeURI decodeURIComponent
encodeURI encodeURIComponent escape eval globalThis isFinite isNaN parseFloat parseInt undefined unescape
""".split()
)
NODE = frozenset(
    """
AbortController AbortSignal Blob BroadcastChannel Buffer CompressionStream CustomEvent DOMException
DecompressionStream Event EventTarget File FormData Headers MessageChannel MessageEvent MessagePort
Performance ReadableStream Request Response TextDecoder TextEncoder TransformStream URL URLSearchParams
WritableStream __dirname __filename atob btoa clearImmediate clearInterval clearTimeout console crypto
exports fetch global module performance process queueMicrotask require setImmediate setInterval
setTimeout structuredClone
""".split()
)
BROWSER = frozenset(
    """
Audio CSS CanvasRenderingContext2D Document DocumentFragment DOMParser Element FileReader HTMLElement
HTMLCanvasElement HTMLInputElement Image IntersectionObserver KeyboardEvent MouseEvent MutationObserver
Node NodeList Notification ResizeObserver Storage WebSocket Window Worker XMLHttpRequest
alert cancelAnimationFrame confirm customElements devicePixelRatio document getComputedStyle history
indexedDB innerHeight innerWidth localStorage location matchMedia navigator open prompt
requestAnimationFrame requestIdleCallback screen scrollTo self sessionStorage window
""".split()
)
# `await (f)(x)` reads to tree-sitter as a call of a function named await: keywords are no names.
GLOBALS = ECMASCRIPT | NODE | BROWSER | {"await", "yield"}
# Globals that come together: a file that already uses one of a group as a global (a test file's
# `describe`) may use the others (`expect`) without defining them.
GROUPS = (
    frozenset(
        "describe it test expect jest beforeEach afterEach beforeAll afterAll suite setup teardown "
        "before after context xit xdescribe fit fdescribe vi".split()
    ),
    frozenset("$ jQuery".split()),
)

# Node types the walk treats by their role; every other node's named children are expressions.
_FUNCTIONS = {
    "function_declaration",
    "generator_function_declaration",
    "function_expression",
    "function",
    "generator_function",
    "arrow_function",
    "method_definition",
}
_BLOCKS = {"statement_block", "switch_body", "for_statement", "for_in_statement", "catch_clause", "class_static_block"}
_PATTERNS = {
    "object_pattern",
    "array_pattern",
    "rest_pattern",
    "pair_pattern",
    "assignment_pattern",
    "object_assignment_pattern",
}
_NOT_NAMES = {
    "comment",
    "property_identifier",
    "private_property_identifier",
    "statement_identifier",
    "string",
    "regex",
    "number",
    "hash_bang_line",
}
# A binding's kind is the word that declared it, and after a "/" why it is never unused: "let",
# "var/loop", "const/pattern" (destructured: pyflakes does not count unpacked names either).
_LOCAL_KINDS = ("let", "const", "var")
_HOISTED = ("var", "function")  # belong to the enclosing function, not the block
READ, WRITE, BIND = "read", "write", "bind"


@dataclass(frozen=True)
class Finding:
    """An undefined name or an unused local variable, and the line it is on."""

    kind: str  # "undefined" | "unused"
    name: str
    line: int
    column: int = 0  # orders findings on one line

    def said(self) -> str:
        if self.kind == "undefined":
            return f"line {self.line}: undefined name '{self.name}'"
        return f"line {self.line}: local variable '{self.name}' is assigned to but never used"


@dataclass(frozen=True)
class JsNames:
    undefined: tuple[Finding, ...] = ()
    unused: tuple[Finding, ...] = ()


def js_names(source: str, language: str = JAVASCRIPT) -> JsNames | str:
    """The undefined names and unused locals of `source`, by line; a problem string when unknown."""
    root = tree_sitter_root(source, language)
    if isinstance(root, str):
        return root
    walk = _Walk()
    walk.run(root)
    return walk.findings(GLOBALS | _declared_globals(root))


_GLOBAL_COMMENT = re.compile(r"/\*\s*globals?\s(?P<names>[^*]*)\*/")


def _declared_globals(root) -> frozenset[str]:
    """The names top-level `/* global a, b:writable */` comments declare."""
    names = set()
    for node in root.named_children:
        found = _GLOBAL_COMMENT.fullmatch(node.text.decode("utf-8", "replace")) if node.type == "comment" else None
        if found:
            names |= {part.split(":")[0] for part in re.split(r"[\s,]+", found["names"])} - {""}
    return frozenset(names)


# The walk's working state: scopes fill in while the tree is read, and names resolve at the end, so
# a use before its (hoisted) definition resolves as the language resolves it.


@dataclass(eq=False)
class _Binding:
    name: str
    kind: str  # let, const, var, param, function, class, import, catch; "/loop", "/pattern" after one
    at: tuple[int, int]
    local: bool  # inside a function or block, not the module's own scope
    reads: int = 0


@dataclass(eq=False)
class _Scope:
    parent: _Scope | None
    is_function: bool
    names: dict[str, _Binding] = field(default_factory=dict)

    def function(self) -> _Scope:
        scope = self
        while not scope.is_function and scope.parent is not None:
            scope = scope.parent
        return scope

    def find(self, name: str) -> _Binding | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None


@dataclass(frozen=True)
class _Use:
    name: str
    scope: _Scope
    at: tuple[int, int]  # tree-sitter's (row, column), both from 0
    read: bool  # False for a plain assignment's target (`x = 1` does not read x)
    guarded: bool = False  # `typeof x`: never a ReferenceError


class _Walk:
    """One pass over the tree with its own stack (a minified bundle nests deeper than Python's)."""

    def __init__(self) -> None:
        self.program = _Scope(None, True)
        self.stack: list[tuple] = []
        self.uses: list[_Use] = []
        self.bindings: list[_Binding] = []

    def run(self, root) -> None:
        self.push(root.named_children, self.program)
        while self.stack:
            node, scope, mode, kind = self.stack.pop()
            if mode == READ:
                self.expression(node, scope)
            else:
                self.pattern(node, scope, mode, kind)

    def push(self, nodes: Iterable, scope: _Scope, mode: str = READ, kind: str = "") -> None:
        self.stack.extend((n, scope, mode, kind) for n in nodes if n is not None and n.type not in _NOT_NAMES)

    def use(self, node, scope: _Scope, read: bool = True, guarded: bool = False) -> None:
        self.uses.append(_Use(node.text.decode("utf-8", "replace"), scope, node.start_point, read, guarded))

    def bind(self, node, scope: _Scope, kind: str) -> None:
        home = scope.function() if kind.split("/")[0] in _HOISTED else scope
        name = node.text.decode("utf-8", "replace")
        if name not in home.names:  # `var x` twice is one variable
            home.names[name] = _Binding(name, kind, node.start_point, home is not self.program)
            self.bindings.append(home.names[name])

    def expression(self, node, scope: _Scope) -> None:
        kind = node.type
        if kind in ("identifier", "shorthand_property_identifier"):
            self.use(node, scope)
        elif kind in _FUNCTIONS or kind in ("class_declaration", "class"):
            self.definition(node, scope)
        elif kind in _BLOCKS:
            self.block(node, _Scope(scope, False))
        elif kind in ("lexical_declaration", "variable_declaration"):
            declared = node.child_by_field_name("kind") or node.children[0]
            for declarator in node.named_children:
                if declarator.type == "variable_declarator":
                    self.push([declarator.child_by_field_name("name")], scope, BIND, declared.type)
                    self.push([declarator.child_by_field_name("value")], scope)
        elif kind in ("assignment_expression", "augmented_assignment_expression"):
            self.assignment(node, scope)
        elif (
            kind == "unary_expression"
            and node.children[0].type == "typeof"
            and node.child_by_field_name("argument").type == "identifier"
        ):
            self.use(node.child_by_field_name("argument"), scope, guarded=True)
        elif kind in ("import_statement", "export_statement"):
            self.module_line(node, scope)
        elif kind in ("jsx_opening_element", "jsx_self_closing_element", "jsx_closing_element"):
            self.jsx(node, scope)
        elif kind not in ("nested_identifier", "jsx_namespace_name"):
            self.push(node.named_children, scope)

    def definition(self, node, scope: _Scope) -> None:
        """A function, method, arrow or class: its name where the language puts it, its own scope."""
        name = node.child_by_field_name("name")
        declared = node.type.endswith("_declaration")
        if name is not None and declared:
            self.bind(name, scope, "class" if node.type == "class_declaration" else "function")
        inner = _Scope(scope, node.type in _FUNCTIONS)
        if name is not None and not declared and node.type != "method_definition":
            self.bind(name, inner, "function")  # a named function or class expression sees its own name
        elif name is not None and name.type == "computed_property_name":
            self.push([name], scope)
        self.push([node.child_by_field_name("parameter")], inner, BIND, "param")
        parameters = node.child_by_field_name("parameters")
        self.push(parameters.named_children if parameters is not None else [], inner, BIND, "param")
        body = node.child_by_field_name("body")
        if body is not None and body.type in ("statement_block", "class_body"):
            self.block(body, inner)
        else:
            self.push([body], inner)
        self.push([c for c in node.named_children if c.type in ("class_heritage", "decorator")], scope)

    def block(self, node, scope: _Scope) -> None:
        """A block's children in `scope`; a `for (let x of ...)` or `catch (e)` binds in it first."""
        if node.type == "for_in_statement":
            declared = node.child_by_field_name("kind")
            left = node.child_by_field_name("left")
            if declared is not None:
                self.push([left], scope, BIND, declared.type + "/loop")
            else:
                self.push([left], scope, WRITE)
            self.push([c for c in node.named_children if c != left], scope)
        elif node.type == "catch_clause":
            self.push([node.child_by_field_name("parameter")], scope, BIND, "catch")
            self.push([c for c in node.named_children if c != node.child_by_field_name("parameter")], scope)
        else:
            self.push(node.named_children, scope)

    def assignment(self, node, scope: _Scope) -> None:
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        plain = node.type == "assignment_expression"
        if plain and (left.type == "identifier" or left.type in _PATTERNS):
            self.push([left], scope, WRITE)
        else:
            self.push([left], scope)
        self.push([right], scope)

    def pattern(self, node, scope: _Scope, mode: str, kind: str) -> None:
        """A binding (`mode` BIND, of `kind`) or an assignment's target (WRITE): its names are
        defined or written; default values and computed keys inside are read."""
        if node.type in ("identifier", "shorthand_property_identifier_pattern"):
            if mode == BIND:
                self.bind(node, scope, kind)
            else:
                self.use(node, scope, read=False)
            return
        inner = kind if kind.split("/")[0] not in _LOCAL_KINDS else kind.split("/")[0] + "/pattern"
        if node.type in ("assignment_pattern", "object_assignment_pattern"):
            self.push([node.child_by_field_name("left")], scope, mode, kind)  # `a = 1` alone is no unpacking
            self.push([node.child_by_field_name("right")], scope)
        elif node.type == "pair_pattern":
            self.push([node.child_by_field_name("key")], scope)
            self.push([node.child_by_field_name("value")], scope, mode, inner)
        elif node.type in ("object_pattern", "array_pattern", "rest_pattern"):
            self.push(node.named_children, scope, mode, inner)
        else:  # `[a.b, c[0]] = ...`: a member written, its object read
            self.push([node], scope)

    def module_line(self, node, scope: _Scope) -> None:
        """`import a, {b as c} from "m"` binds a and c; `export {a as b}` uses a; `export {a} from "m"`
        uses nothing here."""
        if node.type == "import_statement":
            for clause in node.named_children:
                if clause.type == "import_clause":
                    self.imports(clause, scope)
            return
        if node.child_by_field_name("source") is not None:
            return
        for child in node.named_children:
            if child.type == "export_clause":
                for spec in child.named_children:
                    self.push([spec.child_by_field_name("name")], scope)
            else:
                self.push([child], scope)

    def imports(self, clause, scope: _Scope) -> None:
        for child in clause.named_children:
            if child.type == "identifier":
                self.bind(child, scope, "import")
            elif child.type == "namespace_import":
                self.push(child.named_children, scope, BIND, "import")
            elif child.type == "named_imports":
                for spec in child.named_children:
                    if spec.type == "import_specifier":
                        name = spec.child_by_field_name("alias") or spec.child_by_field_name("name")
                        if name.type == "identifier":
                            self.bind(name, scope, "import")

    def jsx(self, node, scope: _Scope) -> None:
        """`<Foo>` uses Foo; `<div>` names an HTML element, no variable."""
        name = node.child_by_field_name("name")
        if name is not None and name.type == "identifier" and name.text[:1].isupper():
            self.use(name, scope)
        elif name is not None and name.type == "member_expression":
            self.push([name], scope)
        self.push([c for c in node.named_children if c != name], scope)

    def findings(self, defined: frozenset[str]) -> JsNames:
        undefined = []
        for use in self.uses:
            binding = use.scope.find(use.name)
            if binding is not None:
                binding.reads += use.read
            elif not use.guarded and use.name not in defined:
                undefined.append(_finding("undefined", use.name, use.at))
        unused = [
            _finding("unused", b.name, b.at)
            for b in self.bindings
            if b.local and b.kind in _LOCAL_KINDS and not b.reads and not b.name.startswith("_")
        ]
        return JsNames(tuple(sorted(undefined, key=_place)), tuple(sorted(unused, key=_place)))


def _finding(kind: str, name: str, at: tuple[int, int]) -> Finding:
    return Finding(kind, name, at[0] + 1, at[1])


def _place(finding: Finding) -> tuple[int, int]:
    return finding.line, finding.column
