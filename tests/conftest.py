"""Shared fixtures. Every test gets its own data folder; nothing touches the user's memory.

`backend` is the one switch between storage backends: tests that take `memory` run once per
backend listed in BACKENDS (the PostgreSQL backend joins this list when it exists).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from cuba_memorys.config import Settings
from cuba_memorys.services.memory import Memory

BACKENDS = ["sqlite"]
SERVER_BIN = Path(sys.executable).with_name("cuba-memorys")


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def settings(tmp_path: Path, backend: str, monkeypatch) -> Settings:
    monkeypatch.setenv("CUBA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return replace(Settings.from_env(), data_dir=tmp_path / "data")


@pytest.fixture
def memory(settings: Settings) -> Iterator[Memory]:
    mem = Memory.open(settings)
    yield mem
    mem.close()


@pytest.fixture
def open_memory(settings: Settings):
    """Open (and later close) more Memory instances on the same data, e.g. to test restarts."""
    opened: list[Memory] = []

    def _open(**changes) -> Memory:
        mem = Memory.open(replace(settings, **changes))
        opened.append(mem)
        return mem

    yield _open
    for mem in opened:
        mem.close()
