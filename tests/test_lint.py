"""The layer rule is enforced by ruff: a module may import only its own layer or below.

Each layer's ``ruff.toml`` bans the layers above it (flake8-tidy-imports banned-api). These
tests feed ruff a probe module as if it lived in each layer (``--stdin-filename``, so the
layer's own configuration applies) and check that an upward import fails and a downward one
passes. ``make test`` runs ruff over the whole tree before the tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "cuba_memorys"
RUFF = Path(sys.executable).with_name("ruff")

UPWARD = [
    ("models_probe.py", "cuba_memorys.storage"),
    ("storage/probe.py", "cuba_memorys.services.memory"),
    ("storage/sql/probe.py", "cuba_memorys.search.hybrid"),
    ("search/probe.py", "cuba_memorys.services.validate"),
    ("judge/probe.py", "cuba_memorys.server.catalog"),
    ("services/probe.py", "cuba_memorys.server.runtime"),
    ("services/graph/probe.py", "cuba_memorys.cli.app"),
    ("storage/probe.py", "cuba_memorys.code.repo"),
    ("code/probe.py", "cuba_memorys.storage.rows"),
    ("code/probe.py", "cuba_memorys.services.memory"),
]
DOWNWARD = [
    ("storage/probe.py", "cuba_memorys.models"),
    ("search/probe.py", "cuba_memorys.storage.protocols"),
    ("services/graph/probe.py", "cuba_memorys.search.selection"),
    ("server/probe.py", "cuba_memorys.services.memory"),
    ("cli/probe.py", "cuba_memorys.server.stdio"),
    ("code/probe.py", "cuba_memorys.errors"),
    ("services/probe.py", "cuba_memorys.code.symbols"),
]


def ruff(where: str, source: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), "check", "--no-cache", "--stdin-filename", str(SRC / where), "-"],
                          input=source, capture_output=True, text=True, cwd=SRC.parent.parent)


@pytest.mark.parametrize("where, target", UPWARD)
def test_importing_a_layer_above_is_a_lint_error(where: str, target: str):
    for source in (f"import {target}\n", f"from {target} import x  # noqa: F401\n"):
        result = ruff(where, source)
        assert result.returncode == 1 and "TID251" in result.stdout, (where, source, result.stdout)


@pytest.mark.parametrize("where, target", DOWNWARD)
def test_importing_the_same_layer_or_below_passes(where: str, target: str):
    result = ruff(where, f"import {target}  # noqa: F401\n")
    assert result.returncode == 0, (where, result.stdout)


def test_relative_imports_are_refused():
    result = ruff("services/graph/probe.py", "from ..memory import Memory  # noqa: F401\n")
    assert result.returncode == 1 and "TID252" in result.stdout
