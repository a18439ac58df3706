"""The package's shape, kept true by tests: no import loop anywhere under src/, every module
within the size limit, and every tool family under one name in storage, services and server.

(Which layer may import which is ruff's job: the per-layer ``ruff.toml`` files ban the layers
above; ``test_lint.py`` runs it.)
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "cuba_memorys"
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path) -> set[str]:
    """Modules of this package that ``path`` imports, anywhere in it (function bodies included:
    a deferred import is still a dependency, and deferring one is how loops are hidden)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import (the layer rules read absolute ones)"
            for alias in node.names:  # a submodule by name, else a name the module defines
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in MODULES else node.module)
    return {name for name in found if name in MODULES}


def test_no_import_loop_anywhere():
    # Edges are the modules whose names a module uses; the parent package that importing a.b
    # also runs is not one (as grimp and import-linter count them).
    graph = {name: imports_of(path) - {name} for name, path in MODULES.items()}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        pytest.fail(f"import loop: {' -> '.join(exc.args[1])}")


def test_every_module_is_within_the_size_limit():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


FAMILIES = ("graph", "observations", "search", "grounding", "workflow", "sessions", "incidents", "reminders",
            "lifecycle", "audit", "calibration")


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_has_one_name_in_every_layer(family: str):
    """storage/sql/<family>.py, services/<family>[.py|/], server/tools/<family>.py."""
    def exists(base: Path) -> bool:
        return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()

    assert exists(PACKAGE / "storage" / "sql" / family), f"storage/sql/{family}"
    assert exists(PACKAGE / "services" / family), f"services/{family}"
    assert exists(PACKAGE / "server" / "tools" / family), f"server/tools/{family}"
