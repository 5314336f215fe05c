"""No import cycles, and no import upwards: every module of src/tokenpath read with `ast`, every import statement
counted (lazy ones inside functions and those under `if TYPE_CHECKING:` too), against the layers written down in
docs/architecture.md (tests/layering.py holds the same list)."""

from __future__ import annotations

import ast

from tests.layering import (
    LAYERS,
    cycle_path,
    cycles,
    file_graph,
    imports,
    imports_in,
    layer_of,
    modules,
    unit,
    unit_graph,
)


def described(g: dict[str, set[str]]) -> list[str]:
    """Each tangle of mutually importing modules (or packages): its members, and one cycle through them."""
    return [f"{', '.join(c)} (e.g. {' -> '.join(cycle_path(g, c))})" for c in cycles(g)]


def test_no_cycle_between_files() -> None:
    found = described(file_graph())
    assert found == [], f"{len(found)} import cycles between files:\n" + "\n".join(found)


def test_no_cycle_between_packages() -> None:
    found = described(unit_graph())
    assert found == [], f"{len(found)} import cycles between packages:\n" + "\n".join(found)


def test_no_package_imports_a_higher_one() -> None:
    layer = layer_of()
    upwards = sorted(
        f"{i.importer}:{i.line} imports {i.imported} ({unit(i.importer)} is below {unit(i.imported)})"
        for i in imports()
        if layer[unit(i.importer)] < layer[unit(i.imported)]
    )
    assert upwards == [], f"{len(upwards)} imports from a lower package to a higher one:\n" + "\n".join(upwards)


def test_every_package_has_its_layer() -> None:
    """A new package (or root module) is placed in LAYERS (and docs/architecture.md) before it can be imported."""
    named = [u for line in LAYERS for u in line.split()]
    assert len(named) == len(set(named)), "a unit named in two layers"
    units = {unit(m) for m in modules()}
    assert sorted(units - set(named)) == [], "place it in LAYERS"
    assert sorted(set(named) - units) == [], "LAYERS names no package or module of that name"


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    """The reader is not fooled by where an import sits (the three known cases of issue 34 were of these kinds)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tokenpath.wire.apis import Api\n"
        "def f():\n    from tokenpath.monitor import otel_names\n    import tokenpath.stats\n"
    )
    found = {i.imported for i in imports_in("tokenpath.x", ast.parse(source))}
    assert found == {"tokenpath.wire.apis", "tokenpath.monitor.otel_names", "tokenpath.stats"}
