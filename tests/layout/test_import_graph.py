"""No import cycle between dspy_adaptive's parts: each subpackage (search, reflection, merge, sandbox, lm,
tasks, demo) and each top-level module is a node; every import of another node, at module level or inside a
function, is an edge. The graph must be acyclic, and nothing in the package may import benchmarks/."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dspy_adaptive"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _node(module: str) -> str:
    """The part a module belongs to: dspy_adaptive.<first component>, or the package root itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every module of the package (or `benchmarks...`) that `module` imports, resolved to known modules."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & known
            found.update(submodules)
            if len(submodules) < len(node.names):      # some names are attributes of `target` itself
                found.add(target)
    return {m for m in found if m in known or m.split(".")[0] == "benchmarks"}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        src = _node(module)
        for target in _imports(module, path, known):
            dst = target if target.split(".")[0] == "benchmarks" else _node(target)
            if dst != src:
                graph.setdefault(src, set()).add(dst)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_parts_of_the_package_import_each_other_without_a_cycle():
    graph = _graph()
    assert {"dspy_adaptive.search", "dspy_adaptive.reflection", "dspy_adaptive.merge"} <= set(graph)  # it walked
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


#: The layers of the package, lowest first: a part may import only parts of lower layers (README "Layout").
LAYERS = (
    ("schema", "escaping", "data", "_moved"),       # typed records, text made safe, rows: import no other part
    ("checks",),                                    # the checks every settings group runs on itself
    ("lm",),                                        # LM backends, endpoint pools, the cost ledger
    ("sandbox",),                                   # where specialist code runs
    ("distill",),                                   # the distilled router: a classifier as data, no program
    ("program",),                                   # the candidate and how it runs (library, routed program)
    ("tasks", "reflection", "merge"),               # family metrics; proposals by reflection and by merge
    ("search",),                                    # the one loop, budget, checkpoint and resume
    ("record",),                                    # the run record: results, reports, plots, tracking
    ("optimizers",),                                # AdaptiveGEPA, the dspy.GEPA mapping, OEO, the run assembly
    ("testing",),                                   # scripted LMs and test doubles
    ("",),                                          # the public API (dspy_adaptive/__init__.py)
    ("demo",),                                      # the offline demo
    ("cli",),                                       # the `adaptive-gepa` command
)


def _layer(node: str) -> int:
    name = node.split(".", 1)[1] if "." in node else ""
    for i, names in enumerate(LAYERS):
        if name in names:
            return i
    raise AssertionError(f"{node} is in no layer of LAYERS: add it where it belongs")


def test_every_part_imports_only_lower_layers():
    upward = sorted(f"{src} -> {dst}" for src, dsts in _graph().items() for dst in dsts
                    if not dst.startswith("benchmarks") and _layer(dst) >= _layer(src))
    assert upward == []


def test_records_is_the_lowest_layer_and_nothing_imports_benchmarks():
    graph = _graph()
    assert not graph.get("dspy_adaptive.schema")                     # imports no other part
    users = sorted(src for src, dsts in graph.items() if any(d.startswith("benchmarks") for d in dsts))
    assert users == []
