"""The package's shape, read from its source: no import cycle (imports inside functions count),
and no ``from .x import _private`` across modules (a shared helper is public in its one home)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "neuronscope"

# Known offenders in modules that other branches are rewriting at the same time: to be removed
# at merge (the lead empties both sets).
ALLOWED_CYCLES: set[frozenset[str]] = {
    frozenset({"neuronscope.result", "neuronscope.report", "neuronscope.analysis.verify"}),
    frozenset({"neuronscope.analysis", "neuronscope.analysis.compile", "neuronscope.analysis.fusion"}),
}
ALLOWED_PRIVATE_IMPORTS: set[tuple[str, str, str]] = {
    (user, "neuronscope.result", "_fmt_us")
    for user in ("neuronscope.compare", "neuronscope.diff", "neuronscope.html_report", "neuronscope.report")
}


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
    for node in ast.walk(tree):
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
    src = PACKAGE / "capture" / "session.py"
    got = dict(imports_of("neuronscope.capture.session", src, known | {"neuronscope.capture.session"}))
    assert "neuronscope.capture.base" in got
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_cycles() -> None:
    graph, _ = _graph()
    cycles = [c for c in _cycles(graph) if not any(c <= allowed for allowed in ALLOWED_CYCLES)]
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in cycles)


def test_scope_modules_are_in_no_cycle() -> None:
    """The scope helper's modules, whatever the allow-list says of the others'."""
    graph, _ = _graph()
    mine = {
        "neuronscope.region", "neuronscope.decorator", "neuronscope.scope", "neuronscope.session",
        "neuronscope.announce", "neuronscope.config", "neuronscope.errors", "neuronscope.capture.base",
        "neuronscope.capture.cpu", "neuronscope.capture.cuda", "neuronscope.capture.dynamo",
        "neuronscope.capture.session", "neuronscope.window", "neuronscope.pipeline",
    }
    for cycle in _cycles(graph):
        assert not (cycle & mine), f"an import cycle through {sorted(cycle & mine)}: {sorted(cycle)}"


def test_no_private_names_imported_across_modules() -> None:
    _, private = _graph()
    bad = [p for p in private if p not in ALLOWED_PRIVATE_IMPORTS]
    assert bad == [], "private names imported from another module: " + ", ".join(f"{m} <- {s}.{n}" for m, s, n in bad)
