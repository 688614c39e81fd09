"""The package's shape, read from its source: the stages in pipeline order (no module imports a
later stage, counting imports inside functions and under ``if TYPE_CHECKING:``), no import cycle
(counted both ways: what runs, and what a reader sees), no name re-exported outside an
``__init__``, no module over 500 lines, no ``from .x import _private`` across modules (a shared
helper is public in its one home), and little mutable module state."""

from __future__ import annotations

import ast
import re
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


def imports_of(
    module: str, path: Path, known: set[str], type_checking: bool = False
) -> list[tuple[str, list[str]]]:
    """``(imported module, names taken from it)`` for every import in ``path``, at any depth
    (those under ``if TYPE_CHECKING:`` only where ``type_checking``)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out: list[tuple[str, list[str]]] = []
    for node in (ast.walk(tree) if type_checking else _runtime_nodes(tree)):
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
#: or a call of dict/list/set/defaultdict/WeakSet/WeakKeyDictionary/local. 11th:
#: capture.stderr._redirect (fd 2 is one per process, and the fork hook must find its redirect).
MAX_MUTABLE_GLOBALS = 11
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


# ---- stages -----------------------------------------------------------------------------------
#: The pipeline's stages in order; a module may import its own stage and earlier ones only.
#: A module is in the stage of its first dotted part below ``neuronscope`` (``capture.cpu`` is in
#: ``capture``); the package root, ``__main__`` and the top-level drivers are last.
STAGES: tuple[tuple[str, ...], ...] = (
    ("errors", "config", "units", "announce"),
    ("capture",),
    ("events",),
    ("result",),
    ("analysis",),
    ("export",),
    ("report",),
    ("drive",),
    ("compare",),
    ("decorator", "region", "integrations", "demo", "doctor", "cli", "", "__main__"),
)


def stage_of(module: str) -> int:
    """The index in :data:`STAGES` of ``module`` (``neuronscope.capture.cpu`` -> 1)."""
    head = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(STAGES):
        if head in names:
            return i
    raise AssertionError(f"{module} is in no stage of STAGES: add its package there")


def _all_imports() -> dict[str, set[str]]:
    """Every import of every module, ``TYPE_CHECKING`` ones included (they name what a module
    depends on even where they do not run)."""
    modules = _modules()
    known = set(modules)
    out: dict[str, set[str]] = {}
    for module, path in modules.items():
        out[module] = {s for s, _ in imports_of(module, path, known, type_checking=True) if s in known and s != module}
    return out


def test_no_module_imports_a_later_stage() -> None:
    backward = [
        f"{m} -> {s}" for m, sources in sorted(_all_imports().items()) for s in sorted(sources) if stage_of(s) > stage_of(m)
    ]
    assert backward == [], "imports of a later stage: " + ", ".join(backward)


def test_no_import_cycles_counting_type_checking() -> None:
    cycles = _cycles(_all_imports())
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in cycles)


def test_every_module_is_in_a_stage() -> None:
    for module in _modules():
        stage_of(module)


def test_the_stage_check_sees_a_function_level_import(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from neuronscope.report.text import x\n    return x\n")
    got = {s for s, _ in imports_of("neuronscope.result.m", src, {"neuronscope.report.text"}, type_checking=True)}
    assert got == {"neuronscope.report.text"}
    assert stage_of("neuronscope.report.text") > stage_of("neuronscope.result.m")


# ---- size ---------------------------------------------------------------------------------------
MAX_LINES = 500


def test_no_module_over_500_lines() -> None:
    long = {m: len(p.read_text().splitlines()) for m, p in _modules().items()}
    over = sorted(f"{m} ({n})" for m, n in long.items() if n > MAX_LINES)
    assert over == [], f"modules over {MAX_LINES} lines: " + ", ".join(over)


# ---- re-exports --------------------------------------------------------------------------------
ROOT = PACKAGE.parent


def _top_level_names(tree: ast.Module) -> tuple[set[str], set[str], list[str]]:
    """(names the module defines, names it imports, its ``__all__``), at module level."""
    defined: set[str] = set()
    imported: set[str] = set()
    listed: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    if t.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                        listed = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                    # ``x = other_module_name`` is an alias of an imported name, not a definition
                    elif isinstance(node.value, ast.Name) and node.value.id in imported:
                        imported.add(t.id)
                    else:
                        defined.add(t.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                imported.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.If):  # TYPE_CHECKING blocks, version switches
            for sub in node.body + node.orelse:
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    imported.update((a.asname or a.name).split(".")[0] for a in sub.names)
                elif isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    defined.add(sub.name)
        elif isinstance(node, ast.Try):
            for sub in node.body + [s for h in node.handlers for s in h.body] + node.orelse:
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    imported.update((a.asname or a.name).split(".")[0] for a in sub.names)
                elif isinstance(sub, (ast.FunctionDef, ast.ClassDef, ast.Assign)):
                    defined.update(getattr(sub, "name", None) and {sub.name} or {t.id for t in getattr(sub, "targets", []) if isinstance(t, ast.Name)})
    return defined, imported - defined, listed


def reexports() -> list[str]:
    """Names that a module which is not an ``__init__`` passes on from elsewhere: listed in its
    ``__all__``, or imported from it by another module of the package, its tests, benchmarks or
    examples, rather than from the name's home."""
    modules = _modules()
    passed_on: dict[str, set[str]] = {}
    found: set[str] = set()
    for module, path in modules.items():
        if path.name == "__init__.py":
            continue
        _, imported, listed = _top_level_names(ast.parse(path.read_text(), str(path)))
        passed_on[module] = imported
        found.update(f"{module}.{n} (in __all__)" for n in listed if n in imported)
    readers = [*modules.items()] + [
        (p.stem, p) for d in ("tests", "benchmarks", "examples") for p in sorted((ROOT / d).rglob("*.py"))
    ]
    for module, path in readers:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in passed_on and not node.level:
                found.update(
                    f"{node.module}.{a.name} (imported by {module})" for a in node.names if a.name in passed_on[node.module]
                )
    return sorted(found)


def test_no_name_is_re_exported_outside_an_init() -> None:
    found = reexports()
    assert found == [], f"{len(found)} names re-exported outside an __init__: " + ", ".join(found)


# ---- torch's private names -----------------------------------------------------------------------
#: The one module that may name torch's private API (each name with the torch version checked
#: and what breaks without it).
TORCH_PRIVATE_HOME = "neuronscope.capture.torch_private"
#: Attributes of torch objects that are private API though their names have no underscore.
_PRIVATE_ATTRIBUTES = {"kineto_results"}


def torch_private_uses(module: str, path: Path) -> list[str]:
    """``module:line name`` for each private torch name ``path`` uses: an import from a private
    torch module (``torch._C``, ``torch.utils._pytree``), an underscored attribute of
    ``torch...`` or of a name imported from torch, a private module named in a string
    (``sys.modules.get("torch._dynamo.utils")``), or ``kineto_results``."""
    tree = ast.parse(path.read_text(), str(path))
    from_torch: set[str] = {"torch"}
    found: list[str] = []
    private_module = re.compile(r"^torch(\.\w+)*\._\w")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            from_torch.update(a.asname or a.name for a in node.names)
            if private_module.match(node.module) or any(a.name.startswith("_") for a in node.names):
                found.append(f"{module}:{node.lineno} from {node.module} import ...")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    from_torch.add((a.asname or a.name).split(".")[0])
                    if private_module.match(a.name):
                        found.append(f"{module}:{node.lineno} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            rooted = isinstance(base, ast.Name) and base.id in from_torch
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            ours = isinstance(base, ast.Name) and base.id == "torch_private"  # the home's accessor
            if (rooted and private) or (node.attr in _PRIVATE_ATTRIBUTES and not ours):
                found.append(f"{module}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Call) and any(
            isinstance(a, ast.Constant) and isinstance(a.value, str) and (private_module.match(a.value) or a.value in _PRIVATE_ATTRIBUTES)
            for a in node.args
        ):
            found.append(f"{module}:{node.lineno} {ast.unparse(node)[:60]}")
    return found


def test_torch_private_names_live_in_one_module() -> None:
    found = [
        use
        for module, path in _modules().items()
        if module != TORCH_PRIVATE_HOME
        for use in torch_private_uses(module, path)
    ]
    assert found == [], f"private torch names outside {TORCH_PRIVATE_HOME}: " + ", ".join(found)


def test_the_private_name_check_sees_each_form(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import sys\nimport torch\nfrom torch._C._profiler import X\nfrom torch.autograd import profiler as p\n"
        "a = torch.autograd.profiler._is_profiler_enabled\nb = p._disable_profiler\n"
        "c = sys.modules.get('torch._dynamo.utils')\nd = prof.profiler.kineto_results\ne = torch.randn\n"
    )
    found = torch_private_uses("m", src)
    assert len(found) == 5 and not any(".randn" in f for f in found), found
