"""Each backend implements every storage family Protocol, member for member.

``runtime_checkable`` only checks that a name exists, so the parameters are compared too: a
backend whose method drifted from its Protocol (a renamed or missing parameter) fails here,
before a service calls it with the Protocol's names.
"""

from __future__ import annotations

import inspect

import pytest

from cuba_memorys.services.memory import Memory
from cuba_memorys.storage import protocols
from cuba_memorys.storage.protocols import FAMILIES, Store


def members(family: type) -> dict[str, object]:
    return {name: value for name, value in vars(family).items()
            if not name.startswith("_") and callable(value)}


def test_every_family_is_part_of_the_union_and_none_overlaps():
    seen: dict[str, str] = {}
    for family in FAMILIES:
        assert issubclass(family, object) and family in Store.__mro__
        for name in members(family):
            assert name not in seen, f"{name} is in both {seen[name]} and {family.__name__}"
            seen[name] = family.__name__
    union = {n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))}
    assert union == set(seen)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
def test_the_open_store_implements_the_family(memory: Memory, family: type):
    store = memory.store
    assert isinstance(store, family)
    for name, member in members(family).items():
        implemented = getattr(type(store), name)
        wanted = list(inspect.signature(member).parameters)
        have = list(inspect.signature(implemented).parameters)
        assert have == wanted, f"{type(store).__name__}.{name}{have} differs from {family.__name__}{wanted}"


def test_attributes_of_the_core_family(memory: Memory):
    store = memory.store
    for attribute in protocols.CoreStore.__annotations__:
        assert hasattr(store, attribute), attribute
    assert store.backend in ("sqlite", "postgresql")
    assert isinstance(store.location, str) and store.location
