"""`cuba-memorys migrate --to postgresql://…`: the embedded memory copied into PostgreSQL.

Inherently SQLite → PostgreSQL, so not parameterised by `backend`: the source is a real
embedded memory filled through the services, the target a real (empty) PostgreSQL database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from conftest import BACKENDS, SERVER_BIN, PostgresForTests
from cuba_memorys.config import Settings
from cuba_memorys.errors import ConfigError, InvalidInput, StorageError
from cuba_memorys.services import audit
from cuba_memorys.services.admin.migrate import to_postgres
from cuba_memorys.services.graph import episodes, projects, relations
from cuba_memorys.services.lifecycle import rem
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.storage import migrate as storage_migrate
from cuba_memorys.storage.postgres.store import tsvector_literal
from cuba_memorys.storage.sql.common import lexical_texts

pytestmark = pytest.mark.skipif("postgresql" not in BACKENDS, reason="needs the PostgreSQL test server")

FACTS = {
    "deploy": ["Deploys go out with blue-green switching behind the HAProxy load balancer.",
               "Canary releases send five percent of traffic to the new version first.",
               "Rollbacks flip the load balancer back to the previous colour in seconds."],
    "database": ["Nightly backups of PostgreSQL are kept for thirty days in object storage.",
                 "Schema changes go through numbered migration files reviewed in pull requests.",
                 "The read replica lags the primary by under a second."],
    "auth": ["Access tokens are JWTs that expire after fifteen minutes.",
             "Refresh tokens rotate on every use and are stored hashed.",
             "Login is rate limited to ten attempts per minute per address."],
    "frontend": ["The dashboard is written in React with TypeScript and Vite.",
                 "Component state lives in Zustand stores rather than Redux.",
                 "Storybook documents every shared UI component."],
}
QUERIES = ["how do we deploy with blue green", "how long are database backups kept",
           "when do access tokens expire", "which state library does the dashboard use"]


@dataclass
class Source:
    settings: Settings
    memory: Memory

    @property
    def path(self) -> Path:
        return self.settings.sqlite_path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
        return {**env, "CUBA_DATA_DIR": str(self.settings.data_dir)}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Source:
    """An embedded memory with rows in every table, embeddings, tags and a project."""
    settings = replace(Settings.from_env(), data_dir=tmp_path_factory.mktemp("source") / "data",
                       database_url="")
    mem = Memory.open(settings)
    projects.switch(mem, None, "shop")
    for entity, facts in FACTS.items():
        observations.batch_add(mem, None, [{"entity_name": entity, "content": f} for f in facts])
    relations.create(mem, None, "deploy", "database", "depends_on")
    relations.create(mem, None, "auth", "database", "uses", bidirectional=True)
    episodes.add(mem, None, entity_name="deploy", content="The March outage: a bad canary was rolled back.",
                 actors=["ana"], artifacts=["runbook.md"])
    # No service writes sessions or errors yet: rows as the original's tools left them. The
    # error has no FTS row, so the copy must compute its lexical columns itself.
    conn = mem.store.db.conn
    project_id = mem.client(None).project_id
    conn.execute("INSERT INTO sessions(id, name, goals, project_id, started_at)"
                 " VALUES ('s1', 'release week', '[\"ship\"]', ?, '2025-01-02T10:00:00.000000Z')", (project_id,))
    conn.execute("INSERT INTO errors(id, error_type, error_message, context, project_id, session_id, created_at)"
                 " VALUES ('e1', 'TimeoutError', 'upstream payment gateway timed out', '{\"retries\": 3}',"
                 " ?, 's1', '2025-01-02T11:00:00.000000Z')", (project_id,))
    # Tables later migrations added come along too (found in the file, children after parents).
    first, second = sorted(r[0] for r in conn.execute("SELECT id FROM observations LIMIT 2"))
    conn.execute("INSERT INTO judgments(id, observation_a, observation_b, verdict, confidence, backend,"
                 " created_at) VALUES ('j1', ?, ?, 'complementary', 0.9, 'heuristic',"
                 " '2025-01-03T09:00:00.000000Z')", (first, second))
    audit.append(mem, None, event_action="release.approved", payload={"by": "ci"})  # identity ids of their own
    rem.run_cycle(mem)
    assert mem.wait_for_embeddings(120)  # vectors and the reranker's token vectors written
    yield Source(settings, mem)
    mem.close()


@pytest.fixture
def target(postgres: PostgresForTests):
    url = postgres.new_database(empty=True)  # no schema at all: migrate must create it
    yield url
    postgres.drop(url)


@pytest.fixture(scope="module")
def migrated(source: Source, postgres: PostgresForTests):
    """One migrated target shared by the read-only checks: (url, report)."""
    url = postgres.new_database(empty=True)
    yield url, to_postgres(source.settings, url)
    postgres.drop(url)


# -- helpers ----------------------------------------------------------------------------------------

def sqlite_rows(path: Path, table: str) -> dict:
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute(f"SELECT * FROM {table}")]
    return {r.get("id", r.get("key")): r for r in rows}


def pg_query(url: str, sql: str, params=()) -> list[dict]:
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        if conn.execute("SELECT to_regtype('vector')").fetchone()["to_regtype"]:
            register_vector(conn)
        return conn.execute(sql, params).fetchall()


def pg_rows(url: str, table: str) -> dict:
    return {r.get("id", r.get("key")): r for r in pg_query(url, f"SELECT * FROM {table}")}


def tables_of(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return storage_migrate.source_tables(conn)


def source_counts(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables_of(path)}


def target_counts(url: str, path: Path) -> dict[str, int]:
    return {t: pg_query(url, f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in tables_of(path)}


def has_schema(url: str) -> bool:
    return pg_query(url, "SELECT to_regclass('entities') IS NOT NULL AS present")[0]["present"]


def top_ids(mem: Memory, query: str, k: int = 5) -> list[str]:
    return [r["id"] for r in search.faro(mem, None, query=query, limit=k, track_access=False)["results"]]


# -- the copy -----------------------------------------------------------------------------------------

def test_every_row_column_id_seq_and_embedding_is_copied(source: Source, migrated) -> None:
    url, report = migrated
    assert report["verified"] is True
    assert report["copied"] == source_counts(source.path)
    assert report["embedded"] == {"observations": 12, "episodes": 1}
    assert report["embedding_dim"] == 384 and report["replaced"] == []
    tables = tables_of(source.path)
    assert {"meta", "projects", "sessions", "entities", "observations", "relations", "episodes",
            "errors"} <= set(tables) and tables.index("entities") < tables.index("observations")
    for table in tables:
        ours, theirs = sqlite_rows(source.path, table), pg_rows(url, table)
        assert ours.keys() == theirs.keys(), table
        for key, row in ours.items():
            copied = theirs[key]
            for column, value in row.items():
                if column == "embedding" and value is not None:
                    np.testing.assert_array_equal(copied[column].to_numpy(), np.frombuffer(value, np.float32))
                else:
                    assert copied[column] == value, (table, key, column)
    tags = [json.loads(r["tags"]) for r in pg_rows(url, "observations").values()]
    assert all(tags) and {"blue", "green"} <= set(sum(tags, []))
    # the reranker's token vectors (issue 31) come along byte for byte, like the embeddings
    tokens = [r["token_vectors"] for r in pg_rows(url, "observations").values()]
    assert len(tokens) == 12 and all(isinstance(t, bytes) and len(t) > 400 for t in tokens)


def test_target_gets_schema_lexical_index_and_hnsw(migrated) -> None:
    url, _ = migrated
    applied = [r["name"] for r in pg_query(url, "SELECT name FROM schema_migrations ORDER BY version")]
    assert applied and applied[0] == "0001_core.sql"
    for table, source_sql in storage_migrate.LEXICAL_SOURCES.items():
        for row in pg_query(url, f"SELECT {source_sql} AS text, lex_raw, lex_stem, tsv_raw::text AS tsv_raw,"
                                 f" tsv_stem::text AS tsv_stem FROM {table}"):
            raw, stem = lexical_texts(row["text"])
            assert (row["lex_raw"], row["lex_stem"]) == (raw, stem), table
            expected = pg_query(url, "SELECT CAST(%s AS tsvector)::text AS a, CAST(%s AS tsvector)::text AS b",
                                (tsvector_literal(raw.split()), tsvector_literal(stem.split())))[0]
            assert (row["tsv_raw"], row["tsv_stem"]) == (expected["a"], expected["b"]), table
    indexes = {r["indexname"] for r in pg_query(url, "SELECT indexname FROM pg_indexes")}
    assert {"observations_hnsw_384", "episodes_hnsw_384"} <= indexes


def test_search_on_the_target_finds_what_the_source_finds(source: Source, migrated) -> None:
    url, _ = migrated
    stored = set(sqlite_rows(source.path, "observations"))
    target = Memory.open(replace(source.settings, database_url=url))
    try:
        assert target.store.backend == "postgresql"
        for query in QUERIES:
            ours, theirs = top_ids(source.memory, query), top_ids(target, query)
            assert ours[0] == theirs[0] and ours[0] in stored, query
            # The observations rank alike. Entity hits may differ: the backends' lexical scores
            # (FTS5 bm25 vs ts_rank_cd) are on other scales, and a natively written
            # PostgreSQL memory shows the same entity hits, so that is no copying error.
            assert [i for i in ours if i in stored][:3] == [i for i in theirs if i in stored][:3], query
    finally:
        target.close()


def test_new_rows_on_the_target_continue_after_the_copied_seqs(source: Source, target: str) -> None:
    to_postgres(source.settings, target)
    top = {t: pg_query(target, f"SELECT max(seq) AS m FROM {t}")[0]["m"] for t in ("entities", "observations")}
    mem = Memory.open(replace(source.settings, database_url=target))
    try:
        added = observations.add(mem, None, entity_name="billing", content="Invoices are issued on the first day.")
    finally:
        mem.close()
    row = pg_query(target, "SELECT o.seq, e.seq AS entity_seq FROM observations o JOIN entities e"
                           " ON e.id = o.entity_id WHERE o.id = %s", (added["id"],))[0]
    assert (row["seq"], row["entity_seq"]) == (top["observations"] + 1, top["entities"] + 1)


def test_audit_events_and_cycles_continue_after_the_copied_ids(source: Source, target: str) -> None:
    to_postgres(source.settings, target)
    last = {t: pg_query(target, f"SELECT max(id) AS m FROM {t}")[0]["m"] for t in ("audit_log", "rem_cycles")}
    assert all(last.values())
    mem = Memory.open(replace(source.settings, database_url=target))
    try:
        appended = audit.append(mem, None, event_action="migrated", payload={})
        cycle = rem.run_cycle(mem)
        assert audit.verify(mem, None)["ok"] is True  # the copied chain goes on unbroken
    finally:
        mem.close()
    assert (appended["id"], cycle["cycle_id"]) == (last["audit_log"] + 1, last["rem_cycles"] + 1)


# -- refusals and safety --------------------------------------------------------------------------------

def test_a_target_holding_a_memory_is_refused_unless_forced(source: Source, postgres: PostgresForTests) -> None:
    url = postgres.new_database()  # migrated and secured (meta app_role), as a used server leaves it
    try:
        mem = Memory.open(replace(source.settings, database_url=url))
        theirs = observations.add(mem, None, entity_name="other", content="A memory that was here first.")["id"]
        mem.close()
        before = target_counts(url, source.path)
        with pytest.raises(StorageError, match="already holds a memory.*--force"):
            to_postgres(source.settings, url)
        assert target_counts(url, source.path) == before  # nothing written

        for _ in range(2):  # forcing again replaces again: never duplicates
            report = to_postgres(source.settings, url, force=True)
            assert report["verified"] and report["replaced"]
            counts = target_counts(url, source.path)
            assert counts == {**source_counts(source.path), "meta": counts["meta"]}
        assert not pg_query(url, "SELECT 1 FROM observations WHERE id = %s", (theirs,))
        # the database's own setting survives; the memory's metadata is the source's
        meta = {r["key"]: r["value"] for r in pg_query(url, "SELECT key, value FROM meta")}
        assert meta.pop("app_role") == "cuba_app"
        assert meta == {k: r["value"] for k, r in sqlite_rows(source.path, "meta").items()}
    finally:
        postgres.drop(url)


def test_a_prepared_but_unused_database_is_accepted(source: Source, postgres: PostgresForTests) -> None:
    """As the README's setup leaves it: schema made (doctor) and secured, no memory yet."""
    url = postgres.new_database()
    try:
        report = to_postgres(source.settings, url)
        assert report["verified"] and report["replaced"] == []
        target = Memory.open(replace(source.settings, database_url=url))
        try:
            assert target.store.runtime_role()["role"] == "cuba_app"  # row-level security binds
            query = QUERIES[0]
            assert top_ids(target, query)[0] == top_ids(source.memory, query)[0]
        finally:
            target.close()
    finally:
        postgres.drop(url)


@pytest.mark.parametrize("when", ["in the middle of a COPY", "after every table was copied"])
def test_an_interrupted_copy_leaves_the_target_as_it_was(source: Source, target: str, monkeypatch,
                                                        when: str) -> None:
    real_rows = storage_migrate._source_rows

    def rows_then_interrupt(src, table, columns, lexical):
        for n, row in enumerate(real_rows(src, table, columns, lexical)):
            if table == "observations" and n == 5:
                raise KeyboardInterrupt  # as Ctrl-C
            yield row

    def interrupt(*_args) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        if when.startswith("in the middle"):
            patch.setattr(storage_migrate, "_source_rows", rows_then_interrupt)
        else:
            patch.setattr(storage_migrate, "_advance_sequences", interrupt)
        with pytest.raises(KeyboardInterrupt):
            to_postgres(source.settings, target)
    assert not has_schema(target)  # not even the schema: it was part of the transaction
    assert to_postgres(source.settings, target)["verified"]  # running again is safe
    assert target_counts(target, source.path) == source_counts(source.path)


def test_a_killed_process_leaves_the_target_as_it_was(source: Source, target: str) -> None:
    """SIGKILL once every row is in (the indexes not built yet): PostgreSQL rolls back."""
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from cuba_memorys.storage import migrate

        def stall(*_args):
            print("loaded", flush=True)
            time.sleep(120)

        migrate._build_indexes = stall
        migrate.copy_to_postgres(Path({str(source.path)!r}), {target!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=source.env())
    try:
        assert proc.stdout.readline().strip() == "loaded"
    finally:
        proc.kill()
        proc.wait()
    assert not has_schema(target)
    assert to_postgres(source.settings, target)["verified"]
    assert target_counts(target, source.path) == source_counts(source.path)


def test_a_copy_that_does_not_verify_is_rolled_back(source: Source, target: str, monkeypatch) -> None:
    real = storage_migrate._source_rows

    lost: list[str] = []

    def losing_a_row(src, table, columns, lexical):
        rows = list(real(src, table, columns, lexical))
        if table == "facts":  # the lost row's facts go with it, so no foreign key fails first
            return [r for r in rows if r[columns.index("observation_id")] not in lost]
        if table != "observations":
            return rows
        # lose one no judgment points at, so the copy fails verification, not a foreign key
        judged = {i for pair in src.execute("SELECT observation_a, observation_b FROM judgments") for i in pair}
        victim = next(r for r in reversed(rows) if r[columns.index("id")] not in judged)
        lost.append(victim[columns.index("id")])
        return [r for r in rows if r is not victim]

    monkeypatch.setattr(storage_migrate, "_source_rows", losing_a_row)
    with pytest.raises(StorageError, match="did not verify.*observations: \\(12, 12, 12\\) in SQLite, \\(11,"):
        to_postgres(source.settings, target)
    assert not has_schema(target)


def test_bad_targets_and_sources_are_refused(source: Source, target: str, tmp_path: Path) -> None:
    for bad in ("mysql://user@host/db", "sqlite:///tmp/memory.db", "", None):
        with pytest.raises(InvalidInput, match="--to: must be a PostgreSQL URL"):
            to_postgres(source.settings, bad)
    with pytest.raises(ConfigError, match="already PostgreSQL"):
        to_postgres(replace(source.settings, database_url=target), target)
    with pytest.raises(StorageError, match="no embedded memory"):
        to_postgres(replace(source.settings, data_dir=tmp_path / "nothing"), target)
    with pytest.raises(StorageError, match=r"PostgreSQL at postgresql://u:\*\*\*@127.0.0.1:1/db") as err:
        to_postgres(source.settings, "postgresql://u:secret@127.0.0.1:1/db")
    assert "secret" not in str(err.value)
    assert not has_schema(target)


# -- the command line ----------------------------------------------------------------------------------

def run_cli(source: Source, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SERVER_BIN), "migrate", *args], env=source.env(), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_force_never_erases_an_audit_chain_of_the_targets_own(source: Source, postgres: PostgresForTests) -> None:
    url = postgres.new_database()
    try:
        mem = Memory.open(replace(source.settings, database_url=url))
        audit.append(mem, None, event_action="approved.here", payload={})  # a chain the source does not hold
        mem.close()
        before = target_counts(url, source.path)
        with pytest.raises(StorageError, match="audit log.*never be erased"):
            to_postgres(source.settings, url, force=True)
        assert target_counts(url, source.path) == before  # nothing written, the chain intact
    finally:
        postgres.drop(url)


def test_cli_end_to_end(source: Source, target: str) -> None:
    done = run_cli(source, "--to", target, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verified"] is True and report["copied"] == source_counts(source.path)
    password = psycopg.conninfo.conninfo_to_dict(target).get("password")
    assert report["target"] and (not password or password not in done.stdout)
    assert report["seconds"] >= 0 and report["source"] == str(source.path)

    again = run_cli(source, "--to", target)
    assert again.returncode == 2 and again.stderr.startswith("error: ") and "--force" in again.stderr
    assert target_counts(target, source.path) == source_counts(source.path)

    forced = run_cli(source, "--to", target, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "counts verified" in forced.stdout and "observations: 12 rows" in forced.stderr
    assert target_counts(target, source.path) == source_counts(source.path)

    bad = run_cli(source, "--to", "mysql://host/db")
    assert bad.returncode == 2 and "must be a PostgreSQL URL" in bad.stderr
