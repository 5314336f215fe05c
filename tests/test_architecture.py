"""docs/architecture.md is held to the code, as tests/test_errors.py holds the README's exit-code table to the error
tree: its module tree lists every module under src/tokenpath once, names no file that is gone, and lists each
directory bottom-up (a module after the modules it imports, the packages in the order of the layers), and its
"Layers" list is the one tests/test_layers.py enforces."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.layering import LAYERS, PACKAGE, ROOT, imports, layer_of, module_name, modules

DOC = ROOT / "docs" / "architecture.md"
ENTRY = re.compile(r"(?P<names>[A-Za-z_]\w*(?:\.py|/)(?: [A-Za-z_]\w*\.py)*)(?: {2,}(?P<text>\S.*))?")
MAX_ENTRY_INDENT = 8  # entries sit at 2, 4, 6 or 8 spaces; a description's continuation lines further in
# What the tree cites as code: CamelCase names (two humps or more), calls (`name(`), UPPER_CASE constants.
CITED = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+\b|\b[a-z_][a-z0-9_]*(?=\()|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")
# Cited words that are the outside world's, not ours: products, units, attacks, kernel, HTTP/2 and zlib constants,
# and the environment variables tokenpath reads.
OUTSIDE = (
    "ErrorType GenAI MadeYouReset MemoryBIO MiB OpenAI OpenTelemetry PyJWT PyPI ReadableStream StreamingResponse "
    "TensorZero setns CLOCK_MONOTONIC END_STREAM REFUSED_STREAM RST_STREAM SCHED_FIFO SETTINGS_MAX_CONCURRENT_STREAMS "
    "SO_REUSEPORT TCP_NODELAY WINDOW_UPDATE Z_SYNC_FLUSH TOKENPATH_LITELLM_VENV TOKENPATH_SOURCE TOKENPATH_TOOLS "
    "TOKENPATH_URL WebSocket"
)


@dataclass
class Entry:
    """One line of the tree that names files (or a directory), with its children when it is a directory."""

    directory: Path  # where the names are
    names: tuple[str, ...]
    line: int
    children: list[Entry] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [self.directory / name.rstrip("/") for name in self.names]

    @property
    def is_directory(self) -> bool:
        return self.names[0].endswith("/")


def fenced_block(first_line: str) -> tuple[int, list[str]]:
    """The lines of the doc's fenced block that begins with `first_line`, and the line number of that line."""
    lines = DOC.read_text().splitlines()
    for i, line in enumerate(lines):
        if line == first_line and i > 0 and lines[i - 1].startswith("```"):
            end = next(j for j in range(i, len(lines)) if lines[j].startswith("```"))
            return i + 1, lines[i:end]
    raise AssertionError(f"docs/architecture.md has no fenced block starting {first_line!r}")


def tree() -> Entry:
    start, lines = fenced_block("src/tokenpath/")
    root = Entry(PACKAGE.parent, ("tokenpath/",), start)
    stack = [root]  # stack[d]: the directory entry at depth d
    for number, line in enumerate(lines[1:], start + 1):
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or indent > MAX_ENTRY_INDENT:
            continue  # a description's continuation
        match = ENTRY.fullmatch(line[indent:]) if indent % 2 == 0 else None
        assert match, f"docs/architecture.md:{number}: not a tree entry: {line!r}"
        depth = indent // 2
        assert depth <= len(stack), f"docs/architecture.md:{number}: indented under no directory"
        del stack[depth:]
        parent = stack[-1]
        entry = Entry(parent.paths[0], tuple(match["names"].split(" ")), number)
        parent.children.append(entry)
        if entry.is_directory:
            assert len(entry.names) == 1, f"docs/architecture.md:{number}: a directory has an entry of its own"
            stack.append(entry)
    return root


def walk(entry: Entry) -> Iterator[Entry]:
    for child in entry.children:
        yield child
        yield from walk(child)


def listed() -> list[Path]:
    return [path for entry in walk(tree()) for path in entry.paths]


def on_disk() -> set[Path]:
    """Every module file, and every directory that holds one (its own entry stands for its __init__.py)."""
    files = {path for path in modules().values() if path.name != "__init__.py"}
    return files | {path.parent for path in files if path.parent != PACKAGE}


def test_every_module_has_one_entry_and_every_entry_is_a_module() -> None:
    paths = listed()
    rel = [_rel(p) for p in paths]
    twice = sorted({r for r in rel if rel.count(r) > 1})
    assert twice == [], f"listed twice: {twice}"
    missing = sorted(_rel(p) for p in on_disk() - set(paths))
    assert missing == [], f"modules the tree in docs/architecture.md does not list: {missing}"
    gone = sorted(_rel(p) for p in set(paths) - on_disk())
    assert gone == [], f"entries in docs/architecture.md's tree that name no module: {gone}"


def _rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


def _owner(path: Path, directory: Path) -> Path:
    """The child of `directory` (a file, or a subdirectory) that `path` lies in."""
    return directory / path.relative_to(directory).parts[0]


def test_each_directory_is_listed_bottom_up() -> None:
    """Within each directory, an entry comes after every entry (file or subdirectory) it imports from; at the top,
    the packages and root modules in the order of the layers. Read top to bottom, the tree describes each module
    before the modules that build on it."""
    path_of = modules()
    root = tree()
    late = set()
    for directory in [root, *(e for e in walk(root) if e.is_directory)]:
        inside = directory.paths[0]
        position = {path: n for n, child in enumerate(directory.children) for path in child.paths}
        for i in imports():
            a, b = path_of[i.importer], path_of[i.imported]
            if inside not in a.parents or inside not in b.parents or a == inside / "__init__.py":
                continue  # not both below this directory, or the directory's own __init__.py
            importer, imported = _owner(a, inside), _owner(b, inside)
            if importer in position and imported in position and position[importer] < position[imported]:
                where = f"{module_name(a)}:{i.line}"
                late.add(f"{_rel(importer)} is listed before {_rel(imported)}, which it imports ({where})")
    assert sorted(late) == [], "\n".join(sorted(late))


def test_the_top_of_the_tree_follows_the_layers() -> None:
    layer = layer_of()
    units = [child.names[0].removesuffix("/").removesuffix(".py") for child in tree().children]
    order = [layer[u] for u in units]
    assert order == sorted(order), f"listed: {units}"


def defined_names() -> set[str]:
    """Every name src/tokenpath defines: classes, functions, methods, assigned names and attributes."""
    names: set[str] = set()
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.id if isinstance(node, ast.Name) else node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return names


def test_every_name_the_tree_cites_is_in_the_code() -> None:
    """A class, function or constant renamed or removed in the code is renamed or removed in the tree too."""
    start, lines = fenced_block("src/tokenpath/")
    defined = defined_names() | set(OUTSIDE.split())
    stale = sorted(
        f"docs/architecture.md:{number}: {name}"
        for number, line in enumerate(lines, start)
        for name in CITED.findall(line)
        if name not in defined
    )
    assert stale == [], "names the code no longer has:\n" + "\n".join(stale)


def test_the_layers_written_down_are_the_ones_enforced() -> None:
    _, lines = fenced_block("lowest first:")
    written = [line.split("  ")[0].strip() for line in lines[1:] if line.strip()]
    assert written == list(LAYERS)
