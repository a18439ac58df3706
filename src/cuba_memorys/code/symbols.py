"""The symbols a source file defines, the calls each makes and the modules the file imports.

One walk over the tree-sitter tree per file. A definition (function, method, class, struct,
enum, trait, interface, type alias) becomes a :class:`Symbol` named ``<file>::<scope>::<name>``,
its scope being the classes, impls, modules and functions around it. Calls are credited to the
nearest enclosing *named* definition, so calls inside a nested definition are that definition's,
not its parent's (spec §4d); an anonymous lambda, closure or callback is not a definition, and
its calls count for the symbol it is written in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import tree_sitter

from cuba_memorys.code.languages import LANGUAGES, parser_for
from cuba_memorys.code.spans import span_hash
from cuba_memorys.errors import CodeAnchorError

SIGNATURE_CHARS = 200
KINDS = ("function", "method", "class", "struct", "enum", "trait", "interface", "type")


@dataclass(frozen=True)
class Symbol:
    kind: str  # one of KINDS
    simple: str  # the bare name: `parse_config`
    qualified: str  # `<relpath>::Class::name`, unique within the file
    path: str  # posix, relative to the repository root
    line_start: int  # 1-based, inclusive (decorators included)
    line_end: int
    signature: str  # the definition's first line
    calls: tuple[str, ...]  # simple names of the callees, first occurrence order
    span_hash: str  # spans.span_hash of lines line_start..line_end


@dataclass(frozen=True)
class ImportStatement:
    path: str
    module: str  # as written: `os.path`, `./util`, `fmt`, `std::collections::HashMap`
    line: int


@dataclass
class _Definition:
    kind: str
    name: str
    span: tree_sitter.Node  # the lines the symbol covers
    head: tree_sitter.Node  # where its signature (first line) is
    scope: str  # what it is to what it holds: "class" (methods inside) or "function"
    qualifier: str | None = None  # a Go method's receiver type, added to the scope


@dataclass
class _Open:
    definition: _Definition
    qualified: str
    calls: list[str] = field(default_factory=list)


def _text(node: tree_sitter.Node | None) -> str:
    return node.text.decode("utf-8", errors="replace") if node is not None and node.text is not None else ""


def _name(node: tree_sitter.Node, name_field: str = "name") -> str:
    return _text(node.child_by_field_name(name_field))


# -- definitions, per language ------------------------------------------------------------
def _python_definition(node: tree_sitter.Node, scope: str) -> _Definition | None:
    span = node
    if node.type == "decorated_definition":
        inner = node.child_by_field_name("definition")
        if inner is None:
            return None
        node = inner
    if node.type == "function_definition":
        return _Definition("method" if scope == "class" else "function", _name(node), span, node, "function")
    if node.type == "class_definition":
        return _Definition("class", _name(node), span, node, "class")
    return None


_JS_FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
_JS_SIMPLE = {
    "function_declaration": ("function", "function"), "generator_function_declaration": ("function", "function"),
    "class_declaration": ("class", "class"), "abstract_class_declaration": ("class", "class"),
    "class": ("class", "class"), "method_definition": ("method", "function"),
    "interface_declaration": ("interface", "class"), "type_alias_declaration": ("type", "class"),
    "enum_declaration": ("enum", "class"),
}


def _js_definition(node: tree_sitter.Node, scope: str) -> _Definition | None:
    if node.type in _JS_SIMPLE:
        kind, holds = _JS_SIMPLE[node.type]
        name = _name(node)
        return _Definition(kind, name, node, node, holds) if name else None
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        target = node.child_by_field_name("name")
        if value is None or value.type not in _JS_FUNCTION_VALUES or target is None or target.type != "identifier":
            return None
        parent = node.parent
        alone = parent is not None and sum(c.type == "variable_declarator" for c in parent.named_children) == 1
        span = parent if alone and parent is not None else node
        return _Definition("function", _text(target), span, span, "function")
    if node.type in ("field_definition", "public_field_definition"):
        value = node.child_by_field_name("value")
        name = _name(node, "property") or _name(node)
        if value is None or value.type not in _JS_FUNCTION_VALUES or not name:
            return None
        return _Definition("method", name, node, node, "function")
    return None


def _go_type_name(node: tree_sitter.Node | None) -> str:
    while node is not None and node.type in ("pointer_type", "generic_type", "parenthesized_type"):
        inner = node.child_by_field_name("type")
        node = inner if inner is not None else (node.named_children[0] if node.named_children else None)
    return _text(node)


def _go_definition(node: tree_sitter.Node, scope: str) -> _Definition | None:
    if node.type == "function_declaration":
        return _Definition("function", _name(node), node, node, "function")
    if node.type == "method_declaration":
        receiver = node.child_by_field_name("receiver")
        params = [c for c in (receiver.named_children if receiver is not None else []) if
                  c.type == "parameter_declaration"]
        owner = _go_type_name(params[0].child_by_field_name("type")) if params else ""
        return _Definition("method", _name(node), node, node, "function", qualifier=owner or None)
    if node.type in ("type_spec", "type_alias"):
        shape = node.child_by_field_name("type")
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(shape.type if shape else "", "type")
        parent = node.parent
        alone = parent is not None and parent.type == "type_declaration" and len(parent.named_children) == 1
        span = parent if alone and parent is not None else node
        return _Definition(kind, _name(node), span, span, "class")
    return None


_RUST_SIMPLE = {"struct_item": "struct", "enum_item": "enum", "trait_item": "trait", "union_item": "struct",
                "type_item": "type"}


def _rust_definition(node: tree_sitter.Node, scope: str) -> _Definition | None:
    if node.type in ("function_item", "function_signature_item"):
        if node.type == "function_signature_item" and scope != "class":
            return None  # an extern block's declaration, not something this file defines
        return _Definition("method" if scope == "class" else "function", _name(node), node, node, "function")
    if node.type in _RUST_SIMPLE:
        return _Definition(_RUST_SIMPLE[node.type], _name(node), node, node, "class")
    return None


def _rust_type_name(node: tree_sitter.Node | None) -> str:
    while node is not None and node.type in ("generic_type", "scoped_type_identifier", "reference_type"):
        if node.type == "scoped_type_identifier":
            node = node.child_by_field_name("name")
        else:
            node = node.child_by_field_name("type")
    return _text(node)


def _rust_scope(node: tree_sitter.Node) -> tuple[str, str] | None:
    """A Rust container that is not itself a symbol: ``impl Type`` and ``mod name``."""
    if node.type == "impl_item":
        return _rust_type_name(node.child_by_field_name("type")), "class"
    if node.type == "mod_item" and node.child_by_field_name("body") is not None:
        return _name(node), "module"
    return None


_DEFINE = {"python": _python_definition, "javascript": _js_definition, "typescript": _js_definition,
           "tsx": _js_definition, "go": _go_definition, "rust": _rust_definition}


# -- calls and imports --------------------------------------------------------------------
_CALLS = {"call": "function", "call_expression": "function", "new_expression": "constructor"}
_CALLEE_NAME = {"attribute": "attribute", "member_expression": "property", "selector_expression": "field",
                "field_expression": "field", "scoped_identifier": "name", "generic_function": "function",
                "parenthesized_expression": None}


def _callee(node: tree_sitter.Node | None) -> str:
    """The simple name a call goes to: the identifier, the attribute / field / last path part."""
    for _ in range(8):  # generic_function wraps a path that wraps a name: a few levels at most
        if node is None:
            return ""
        if node.type not in _CALLEE_NAME:
            return _text(node) if node.type.endswith("identifier") else ""
        name_field = _CALLEE_NAME[node.type]
        node = node.child_by_field_name(name_field) if name_field else (
            node.named_children[0] if node.named_children else None)
    return ""


def _unquote(text: str) -> str:
    return text.strip().strip("'\"`")


def _imports(node: tree_sitter.Node, language: str) -> list[str]:
    kind = node.type
    if language == "python":
        if kind == "import_statement":
            names = node.children_by_field_name("name")
            return [_text(n.child_by_field_name("name") if n.type == "aliased_import" else n) for n in names]
        if kind == "import_from_statement":
            return [_text(node.child_by_field_name("module_name"))]
    elif language == "go":
        if kind == "import_spec":
            return [_unquote(_text(node.child_by_field_name("path")))]
    elif language == "rust":
        if kind == "use_declaration":
            return [" ".join(_text(node.child_by_field_name("argument")).split())]
        if kind == "extern_crate_declaration":
            return [_name(node)]
    elif kind in ("import_statement", "export_statement") and (source := node.child_by_field_name("source")):
        return [_unquote(_text(source))]
    return []


# Node types the walk looks closer at (every other node only passes its children on).
_IMPORT_TYPES = frozenset({"import_statement", "import_from_statement", "import_spec", "use_declaration",
                           "extern_crate_declaration", "export_statement"})
_DEFINITION_TYPES = frozenset({
    "decorated_definition", "function_definition", "class_definition", *_JS_SIMPLE, "variable_declarator",
    "field_definition", "public_field_definition", "function_declaration", "method_declaration", "type_spec",
    "type_alias", "function_item", "function_signature_item", *_RUST_SIMPLE})


# -- the walk -----------------------------------------------------------------------------
class _Walk:
    def __init__(self, rel: str, source: str, language: str) -> None:
        self.rel, self.source, self.language = rel, source, language
        self.define = _DEFINE[language]
        self.symbols: list[Symbol] = []
        self.imports: list[ImportStatement] = []
        self.taken: dict[str, int] = {}
        self.lines = source.replace("\r\n", "\n").split("\n")  # once: a file has many symbols

    def _lines(self, start: int, end: int) -> str:
        """As spans.lines_of(self.source, start, end), without splitting the file each time."""
        first = max(start, 1) - 1
        return "\n".join(self.lines[first:max(end, first)])

    def walk(self, root: tree_sitter.Node) -> None:
        """Visit every node in source order with an explicit stack, never recursing: a deeply
        nested expression (a 3000-term sum, 500 nested brackets) makes a tree as deep, and
        Python's recursion limit is about 1000 frames. The stack holds one level per open node:
        an iterator over its children, the scope they are in, and the definition to close once
        they are done. Written out in one loop: it runs once per node."""
        stack: list[tuple[Iterator[tree_sitter.Node], list[str], str, _Open | None, _Open | None]] = [
            (iter((root,)), [], "module", None, None)]
        push, imports, calls, definitions, define = stack.append, _IMPORT_TYPES, _CALLS, _DEFINITION_TYPES, self.define
        while stack:
            level = stack[-1]
            node = next(level[0], None)
            if node is None:
                stack.pop()
                if level[4] is not None:
                    self.close(level[4])
                continue
            _, scope, scope_kind, owner, _ = level
            kind = node.type  # most nodes are none of the kinds below: test the type once, cheaply
            if kind in imports:
                self._add_imports(node)
            callee_field = calls.get(kind)
            if owner is not None and callee_field and (name := _callee(node.child_by_field_name(callee_field))):
                owner.calls.append(name)
            definition = define(node, scope_kind) if kind in definitions else None
            if definition is not None and definition.name:
                inner_scope = [*scope, definition.qualifier] if definition.qualifier else scope
                opened = self.open(definition, inner_scope)
                push((self._children(node, definition.head), [*inner_scope, definition.name], definition.scope,
                      opened, opened))
                continue
            if kind == "impl_item" or kind == "mod_item":
                container = _rust_scope(node)
                if container is not None:
                    scope, scope_kind = [*scope, container[0]], container[1]
            if node.named_child_count:
                push((iter(node.named_children), scope, scope_kind, owner, None))

    def _add_imports(self, node: tree_sitter.Node) -> None:
        for module in _imports(node, self.language):
            if module:
                self.imports.append(ImportStatement(self.rel, module, node.start_point[0] + 1))

    @staticmethod
    def _children(node: tree_sitter.Node, head: tree_sitter.Node | None = None) -> Iterator[tree_sitter.Node]:
        """Named children; a wrapped definition (Python's decorated one) is opened in place, so
        it is not met again as a definition of its own."""
        for child in node.children:
            if not child.is_named:
                continue
            if head is not None and child == head and head != node:
                yield from (grandchild for grandchild in child.children if grandchild.is_named)
            else:
                yield child

    def open(self, definition: _Definition, scope: list[str]) -> _Open:
        qualified = "::".join([self.rel, *scope, definition.name])
        seen = self.taken.get(qualified, 0) + 1  # a redefinition, two impls' `fmt`: number it
        self.taken[qualified] = seen
        return _Open(definition, qualified if seen == 1 else f"{qualified}#{seen}")

    def close(self, opened: _Open) -> None:
        d = opened.definition
        start, end = d.span.start_point[0] + 1, d.span.end_point[0] + 1
        if d.span.end_point[1] == 0 and end > start:  # a node ending at a line's start ends the line before
            end -= 1
        first = d.head.start_point[0] + 1
        signature = self._lines(first, first).strip()[:SIGNATURE_CHARS]
        self.symbols.append(Symbol(
            kind=d.kind, simple=d.name, qualified=opened.qualified, path=self.rel, line_start=start,
            line_end=end, signature=signature, calls=tuple(dict.fromkeys(opened.calls)),
            span_hash=span_hash(self._lines(start, end))))


def parse_file(rel: str, source: str, language: str) -> tuple[list[Symbol], list[ImportStatement]]:
    """The symbols ``source`` (the text of ``rel``) defines, in source order, and its imports.

    tree-sitter recovers from syntax errors, so a file mid-edit still yields its intact parts.
    Raises CodeAnchorError for an unknown language, a missing grammar or (never expected: the
    walk keeps its own stack) a tree too deep for Python's recursion limit.
    """
    if language not in LANGUAGES:
        raise CodeAnchorError(f"unknown language {language!r}", hint=f"Known: {', '.join(LANGUAGES)}.")
    tree = parser_for(language).parse(source.encode("utf-8"))
    walk = _Walk(rel, source, language)
    try:
        walk.walk(tree.root_node)
    except RecursionError as exc:  # the walk does not recurse; a belt should a helper ever do so
        raise CodeAnchorError(f"{rel} is nested too deeply to list its symbols",
                              hint="The file is left out of the codegraph; anchor it by lines instead.") from exc
    walk.symbols.sort(key=lambda s: (s.line_start, -s.line_end))
    return walk.symbols, walk.imports


def find_symbol(symbols: list[Symbol], name: str) -> Symbol | None:
    """The symbol ``name`` names: its qualified name, else a simple name only one symbol has,
    else a unique ``Class.method`` / ``Class::method`` suffix. None when absent or ambiguous."""
    name = name.strip()
    for symbol in symbols:
        if symbol.qualified == name:
            return symbol
    simple = [s for s in symbols if s.simple == name]
    if len(simple) == 1:
        return simple[0]
    if simple:
        return None
    tail = "::" + name.replace(".", "::")
    suffixed = [s for s in symbols if s.qualified.endswith(tail)]
    return suffixed[0] if len(suffixed) == 1 else None
