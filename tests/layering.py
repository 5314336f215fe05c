"""The import graph of src/tokenpath, read with `ast`, and the intended order of its packages (docs/architecture.md,
"Layers"). Shared by tests/test_layers.py (no cycles, no import upwards) and tests/test_architecture.py (the
module tree lists every file, bottom-up).

Every import statement counts: at module level, inside a function (a lazy import) and under `if TYPE_CHECKING:`.
An import that only runs later, or only for the type checker, still ties the two files together."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "tokenpath"

# Lowest first, one layer a line. A unit is a package under src/tokenpath (`wire`), a module of the root package
# (`errors`) or the root's own __init__.py (`tokenpath`); it imports only from its own layer and the layers below.
LAYERS: tuple[str, ...] = (
    # the root modules
    "tokenpath errors riders clock stopsignals stats hostport userfiles tomlconfig jsonlog tools progress audit "
    "chromium routecheck",
    "wire",  # the sans-IO protocol core
    "links",  # network namespaces
    "serve",  # server and process plumbing
    "controls",  # the relays with known behaviour
    "proxies",  # the catalogue (the controls among its entries)
    "probe",  # the client
    "stub",  # the emitter (its control-plane client connects through probe/transport.py)
    "origins",  # real inference servers started like proxies, their shapes recorded (the stub replays them)
    "axes",  # the measurement axes (the stub's pacing among what they feed)
    "gateway",
    "monitor",  # the probe on a schedule
    "diagnose",
    "results",  # the typed results model
    "report",  # every rendering of the results: terminal, Markdown, CSV, HTML
    "experiment",  # matrix and sweep (they print the report's tables as they run)
    "load",  # the load benchmark (its --fail-on reads monitor/rules.py)
    "demo",
    "cli",
    "__main__",
)


def layer_of() -> dict[str, int]:
    """Each unit's layer, 0 the lowest."""
    return {unit: i for i, units in enumerate(LAYERS) for unit in units.split()}


@dataclass(frozen=True, slots=True)
class Import:
    importer: str  # dotted module names
    imported: str
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module under src/tokenpath by its dotted name (a package by its own name, for its __init__.py)."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def unit(module: str) -> str:
    """The package (or root module) a module belongs to, as LAYERS names it."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _resolve(name: str) -> str:
    """The module an imported dotted name lands in: itself, or its nearest enclosing module (a name in it)."""
    known = modules()
    while name not in known:
        name = name.rpartition(".")[0]
    return name


def imports_in(module: str, tree: ast.AST) -> Iterator[Import]:
    for node in ast.walk(tree):  # every statement, at any depth: lazy and TYPE_CHECKING imports included
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tokenpath":
                    yield Import(module, _resolve(alias.name), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}:{node.lineno}: a relative import; the package imports absolutely"
            if node.module is None or node.module.split(".")[0] != "tokenpath":
                continue
            for alias in node.names:
                # `from tokenpath.monitor import otel_names` imports the module otel_names; `from x import Name`, x
                target = f"{node.module}.{alias.name}"
                yield Import(module, target if target in modules() else _resolve(node.module), node.lineno)


@cache
def imports() -> tuple[Import, ...]:
    """Every import of a tokenpath module by a tokenpath module (a module importing itself left out)."""
    found: list[Import] = []
    for module, path in modules().items():
        found += [i for i in imports_in(module, ast.parse(path.read_text())) if i.imported != module]
    return tuple(dict.fromkeys(found))  # `from m import a, b` is one import of m


def graph(edges: Sequence[tuple[str, str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, b in edges:
        out.setdefault(a, set()).add(b)
        out.setdefault(b, set())
    return out


def file_graph() -> dict[str, set[str]]:
    return graph([(i.importer, i.imported) for i in imports()])


def unit_graph() -> dict[str, set[str]]:
    return graph([(unit(i.importer), unit(i.imported)) for i in imports() if unit(i.importer) != unit(i.imported)])


def cycles(g: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan's algorithm, without recursion), each
    sorted, in a stable order: every cycle of the graph lies within one of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def cycle_path(g: Mapping[str, Set[str]], component: Sequence[str]) -> list[str]:
    """One concrete cycle through the component's first member (breadth-first, so the shortest), for the message."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(g[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")
