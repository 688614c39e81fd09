"""The package's shape, read from its source: no import cycle (imports inside functions count;
imports under ``if TYPE_CHECKING:`` do not, since they never run; importing a submodule imports
its parent packages), no ``from .x import _private`` across modules (a shared helper is public
in its one home), and little mutable module state."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "neuronscope"

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, list[str]]]:
    """``(imported module, names taken from it)`` for every import in ``path``, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out: list[tuple[str, list[str]]] = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names if alias.name.startswith("neuronscope"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                source = _resolve(module, is_package, node.level, node.module)
            elif node.module and node.module.startswith("neuronscope"):
                source = node.module
            else:
                continue
            names = [alias.name for alias in node.names]
            submodules = [n for n in names if f"{source}.{n}" in known]
            out.extend((f"{source}.{n}", []) for n in submodules)
            rest = [n for n in names if n not in submodules]
            if rest:
                out.append((source, rest))
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (its ``else`` runs)."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def _graph() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    private: list[tuple[str, str, str]] = []
    for module, path in modules.items():
        for source, names in imports_of(module, path, known):
            if source not in known or source == module:
                continue
            graph[module].add(source)
            # Importing a submodule runs its parent packages first (below the root package,
            # which every module is under): that is an import of them too.
            parts = source.split(".")
            for depth in range(2, len(parts)):
                parent = ".".join(parts[:depth])
                if parent in known and parent != module and not module.startswith(parent + "."):
                    graph[module].add(parent)
            private.extend((module, source, n) for n in names if n.startswith("_") and not n.startswith("__"))
    return graph, private


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_import_reader_sees_lazy_imports_and_submodules(tmp_path: Path) -> None:
    known = {"neuronscope.a", "neuronscope.capture", "neuronscope.capture.base"}
    src = PACKAGE / "capture" / "record.py"
    got = dict(imports_of("neuronscope.capture.record", src, known | {"neuronscope.capture.record"}))
    assert "neuronscope.capture.base" in got
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_cycles() -> None:
    graph, _ = _graph()
    cycles = _cycles(graph)
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in cycles)


def test_no_private_names_imported_across_modules() -> None:
    _, private = _graph()
    assert private == [], "private names imported from another module: " + ", ".join(f"{m} <- {s}.{n}" for m, s, n in private)


def test_type_checking_imports_are_not_edges(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nelse:\n    from .b import B\n"
    )
    got = dict(imports_of("neuronscope.m", src, {"neuronscope.a", "neuronscope.b"}))
    assert "neuronscope.b" in got and "neuronscope.a" not in got


#: Mutable module-level state the package may hold, at most (issue: "at most 10, each with a
#: comment saying why"). Counted as module-level assignments of a dict, list or set display,
#: or a call of dict/list/set/defaultdict/WeakSet/WeakKeyDictionary/local.
MAX_MUTABLE_GLOBALS = 10
_MUTABLE_CALLS = {
    "dict", "list", "set", "defaultdict", "OrderedDict", "WeakSet", "WeakKeyDictionary",
    "WeakValueDictionary", "local", "ContextVar",
}


def _is_constant_name(targets: list[ast.expr]) -> bool:
    return all(isinstance(t, ast.Name) and t.id.lstrip("_").isupper() for t in targets)


def mutable_globals() -> list[str]:
    """``module.name`` of each module-level binding to a mutable container, a context variable,
    or an instance of a class the module defines (frozen types, locks that guard one of these,
    and ALL_CAPS sentinels are not counted), and of each name a ``global`` rebinds."""
    found: list[str] = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(), str(path))
        own_classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        for node in tree.body:
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            if value is None:
                continue
            mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
                isinstance(value, ast.Call)
                and (
                    (getattr(value.func, "id", None) or getattr(value.func, "attr", None)) in _MUTABLE_CALLS
                    # an instance of the module's own class, unless an ALL_CAPS sentinel
                    or (getattr(value.func, "id", None) in own_classes and not _is_constant_name(targets))
                )
            )
            if mutable:
                found.extend(f"{module}.{t.id}" for t in targets if isinstance(t, ast.Name) and t.id != "__all__")
        rebound = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
        found.extend(f"{module}.{n}" for n in sorted(rebound) if f"{module}.{n}" not in found)
    return sorted(found)


def test_mutable_module_state_is_bounded() -> None:
    found = mutable_globals()
    assert len(found) <= MAX_MUTABLE_GLOBALS, f"{len(found)} mutable module globals: {found}"
