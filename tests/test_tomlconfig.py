from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from tokenpath.errors import UsageError
from tokenpath.tomlconfig import dataclass_from


@dataclass(frozen=True)
class Example:
    name: str
    count: int = 1
    ratio: float = 0.5
    flag: bool = False
    tags: tuple[str, ...] = ()
    table: dict[str, str] = field(default_factory=dict)
    maybe: float | None = None
    mode: Literal["a", "b"] = "a"


def test_values_of_the_right_type_build_the_dataclass() -> None:
    built = dataclass_from(Example, {"name": "x", "count": 2, "ratio": 1, "flag": True, "tags": ["t"],
                                     "table": {"k": "v"}, "maybe": None, "mode": "b"}, "cfg")  # fmt: skip
    assert built == Example("x", 2, 1, True, ("t",), {"k": "v"}, None, "b")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "x", "cont": 1}, "cfg: unknown key(s) ['cont']; known: ["),
        ({"name": 3}, "`name` must be a string, not 3"),
        ({"name": "x", "count": 1.5}, "`count` must be a whole number"),
        ({"name": "x", "count": True}, "`count` must be a whole number"),
        ({"name": "x", "ratio": "0.5"}, "`ratio` must be a number"),
        ({"name": "x", "flag": 1}, "`flag` must be true or false"),
        ({"name": "x", "tags": "t"}, "`tags` must be an array"),
        ({"name": "x", "tags": [1]}, "`tags` must be an array of str"),
        ({"name": "x", "table": []}, "`table` must be a table"),
        ({"name": "x", "maybe": "no"}, "`maybe` must be a number"),
        ({}, "missing 1 required positional argument: 'name'"),
    ],
)
def test_each_mistake_names_the_table_and_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=__import__("re").escape(message)):
        dataclass_from(Example, data, "cfg")
