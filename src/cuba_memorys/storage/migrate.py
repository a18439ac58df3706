"""Copy the embedded SQLite memory into PostgreSQL (`cuba-memorys migrate --to postgresql://…`).

Everything on the target happens in ONE PostgreSQL transaction: the schema migrations, the
check that the target holds no memory yet, (with ``force``) removing the one it holds, the
copy, the identity sequences, the indexes and the verification. An interrupted or failed run
therefore leaves the target exactly as it was (even without its schema), and running again
is always safe. The source is read inside one SQLite read transaction: a consistent snapshot
even while a server keeps writing to it.

Every table of the source schema is copied (found in the file, so tables that later
migrations add come along), every column, ids and seqs as they are. Each table is streamed
with binary COPY into a temporary staging table and moved with one INSERT … SELECT, because:
COPY is the fast path; binary format sends a 384-d embedding as 1.5 kB instead of ~4 kB of
decimal text; COPY FROM is refused on tables under row-level security for roles the policies
bind, INSERT is not; and the tsvector columns are built from their text literal by a CAST in
that INSERT (psycopg has no binary tsvector dumper).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import errors as pg_errors

from cuba_memorys.config import Settings
from cuba_memorys.errors import ConfigError, StorageError
from cuba_memorys.storage.postgres.db import apply_migrations, one_value, redact, storage_error
from cuba_memorys.storage.postgres.roles import META_KEY as APP_ROLE_KEY
from cuba_memorys.storage.postgres.store import tsvector_literal
from cuba_memorys.storage.postgres.vector_index import create_index_sql
from cuba_memorys.storage.sql.common import LEXICAL_SOURCES, lexical_texts
from cuba_memorys.storage.sqlite.store import SqliteStore

EMBEDDED_TABLES = ("observations", "episodes")  # the tables PgStore gives an HNSW index
LEXICAL_COLUMNS = ("lex_raw", "lex_stem", "tsv_raw", "tsv_stem")  # PostgreSQL's; FTS5 on SQLite
# meta rows that describe the target database rather than the memory: they stay as they are.
DATABASE_META_KEYS = (APP_ROLE_KEY,)
LOCK_TIMEOUT = "10s"  # a server holding the target's tables makes the run fail, not hang
INDEX_BUILD_MEMORY = "512MB"  # an HNSW build whose graph fits in memory is several times faster

Progress = Callable[[str], None]
Tables = dict[str, list[str]]  # table -> its columns, parents before children


def sqlite_source(settings: Settings) -> Path:
    """The SQLite file the settings' memory lives in (as :func:`storage.open_store` picks it)."""
    url = settings.database_url
    if url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            f"the memory in use is already PostgreSQL ({redact(url)}); migrate copies the embedded"
            " SQLite memory.",
            hint="Unset DATABASE_URL (or set DATABASE_URL=sqlite:///path) so the source is the"
                 " embedded store; copy between PostgreSQL databases with pg_dump.")
    if url and not url.startswith("sqlite:"):
        raise ConfigError("DATABASE_URL must start with postgresql:// or sqlite:///"
                          f" (got {url.split(':')[0]}:…).")
    path = settings.sqlite_path  # DATABASE_URL=sqlite:///… when set (config.sqlite_url_path)
    if not path.is_file():
        raise StorageError(f"no embedded memory at {path}.",
                           hint="Set CUBA_DATA_DIR to the folder holding memory.db"
                                " (or DATABASE_URL=sqlite:///path/to/memory.db).")
    return path


def copy_to_postgres(source: Path, url: str, *, force: bool = False,
                     progress: Progress | None = None) -> dict:
    """Copy every table of the SQLite memory at ``source`` into the PostgreSQL database at
    ``url``, verify the counts, and commit; nothing is written unless all of it succeeds."""
    started = time.monotonic()
    SqliteStore(source).close()  # brings the source's schema and lexical index up to date
    try:
        with closing(sqlite3.connect(source)) as src, psycopg.connect(url, autocommit=True) as dst:
            src.execute("BEGIN")  # one read snapshot for the copy and the counts
            report = _copy_all(src, dst, url, force, progress or (lambda message: None))
    except sqlite3.Error as exc:
        raise StorageError(f"reading the embedded memory at {source}: {exc}") from exc
    except pg_errors.LockNotAvailable as exc:
        raise StorageError(f"{redact(url)} is busy: another session holds its tables; nothing was written.",
                           hint="Stop the servers using that database and run migrate again.") from exc
    except psycopg.Error as exc:
        raise storage_error(exc, url) from exc
    return {"source": str(source), "target": redact(url), **report,
            "seconds": round(time.monotonic() - started, 2)}


def _copy_all(src: sqlite3.Connection, dst: psycopg.Connection, url: str, force: bool,
              progress: Progress) -> dict:
    with dst.transaction():
        dst.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        dst.execute(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
        apply_migrations(dst)
        register_vector(dst)  # the vector type may exist only since the migration just above
        tables = _matching_tables(src, dst)
        replaced = _clear_target(src, dst, url, tables, force)
        started = time.monotonic()
        copied, deferred = _load(src, dst, tables, progress)
        loaded = time.monotonic()
        dim = _embedding_dim(src)
        progress(f"building the search indexes{f' (HNSW, {dim}-d)' if dim else ''}")
        _build_indexes(dst, deferred, dim)
        indexed = time.monotonic()
        expected = _counts(src, tables)
        _verify(expected, _counts(dst, tables), _meta(src), _meta(dst))
    embedded = {t: expected[t][1] for t in EMBEDDED_TABLES if t in expected}
    rows, copying = sum(copied.values()), loaded - started
    return {"copied": copied, "embedded": embedded, "verified": True, "replaced": replaced,
            "embedding_dim": dim, "copy_seconds": round(copying, 2),
            "copy_rows_per_second": round(rows / copying) if copying > 0 else rows,
            "index_seconds": round(indexed - loaded, 2)}


# -- the two schemas ---------------------------------------------------------------------------
def source_tables(src: sqlite3.Connection) -> list[str]:
    """The memory's tables in the SQLite file, parents before children (so every foreign key
    holds as soon as its row arrives): not the FTS5 tables, their shadow tables or the
    migration log (the target keeps its own)."""
    rows = src.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    virtual = [name for name, sql in rows if sql.upper().startswith("CREATE VIRTUAL")]
    names = [name for name, _ in rows if name not in virtual and name != "schema_migrations"
             and not name.startswith("sqlite_") and not name.startswith(tuple(f"{v}_" for v in virtual))]
    parents = {t: {r[2] for r in src.execute(f"PRAGMA foreign_key_list({t})")} - {t} for t in names}
    try:
        return list(TopologicalSorter(parents).static_order())
    except CycleError as exc:
        raise StorageError(f"the embedded schema's foreign keys form a cycle: {exc.args[1]}") from exc


def _matching_tables(src: sqlite3.Connection, dst: psycopg.Connection) -> Tables:
    """The source's tables and columns, after checking the target has each of them and
    nothing else but its lexical columns: a difference would silently drop or default data."""
    tables = {}
    for table in source_tables(src):
        ours = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
        theirs = [r[0] for r in dst.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum", (table,))]
        missing = [c for c in ours if c not in theirs]
        extra = [c for c in theirs if c not in ours and c not in LEXICAL_COLUMNS]
        if missing or extra:
            raise StorageError(
                f"the {table} table differs between the two schemas (only in SQLite: {missing or 'none'};"
                f" only in PostgreSQL: {extra or 'none'}); nothing was written.",
                hint="Upgrade cuba-memorys so both schemas match, then run migrate again.")
        tables[table] = ours
    return tables


def _clear_target(src: sqlite3.Connection, dst: psycopg.Connection, url: str, tables: Tables,
                  force: bool) -> list[str]:
    """Refuse a target that holds a memory unless ``force``; then empty it. Returns the tables
    that held rows (replaced)."""
    # Taken up front, as strong as the index drops in _load will need (upgrading a weaker lock
    # later could deadlock): no other session writes between this check and the commit, and
    # the target's readers wait for the commit.
    dst.execute(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
    data = [t for t in tables if t != "meta"]
    held = [t for t in data if one_value(dst.execute(f"SELECT EXISTS (SELECT 1 FROM {t})"))]
    if held and not force:
        raise StorageError(
            f"{redact(url)} already holds a memory (rows in {', '.join(held)}); nothing was written.",
            hint="Use --force to replace its contents with this memory (in the same transaction),"
                 " or migrate into an empty database.")
    if "audit_log" in held:
        _check_chain_is_kept(src, dst, url)
    if held:
        # audit_log refuses TRUNCATE (0010_lifecycle.sql); its rows are all in the source's chain
        # (checked above), which the copy brings back. Inside this transaction: a failure re-arms it.
        dst.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_truncate")
        dst.execute(f"TRUNCATE {', '.join(data)}")
        dst.execute("ALTER TABLE audit_log ENABLE TRIGGER audit_log_no_truncate")
    dst.execute("DELETE FROM meta WHERE key <> ALL(%s)", (list(DATABASE_META_KEYS),))
    return held


def _check_chain_is_kept(src: sqlite3.Connection, dst: psycopg.Connection, url: str) -> None:
    """An audit chain is never erased: --force may replace the target's only when every link of
    it is also in the source's (a target filled by an earlier migrate of this memory)."""
    ours = {tuple(row) for row in src.execute("SELECT id, current_hash FROM audit_log")}
    theirs = dst.execute("SELECT id, current_hash FROM audit_log").fetchall()
    if not all(tuple(row) in ours for row in theirs):
        raise StorageError(f"{redact(url)} has an audit log (cuba_archivo) of its own, which can never be erased;"
                           " nothing was written.", hint="Migrate into an empty database.")


def _embedding_dim(src: sqlite3.Connection) -> int | None:
    row = src.execute("SELECT value FROM meta WHERE key = 'embedding_dim'").fetchone()
    return int(row[0]) if row and str(row[0]).isdigit() else None


# -- the copy ----------------------------------------------------------------------------------
def _load(src: sqlite3.Connection, dst: psycopg.Connection, tables: Tables,
          progress: Progress) -> tuple[dict[str, int], list[str]]:
    """Copy every table; returns the rows per table and the definitions of the indexes set
    aside. Plain indexes are built again once over the loaded rows (several times faster than
    row by row for GIN and HNSW); primary keys and unique indexes stay, so duplicates fail as
    they arrive."""
    plain = dst.execute(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " WHERE i.indrelid = ANY(%s::regclass[]) AND NOT i.indisprimary AND NOT i.indisunique",
        (list(tables),)).fetchall()
    for name, _ in plain:
        dst.execute(f"DROP INDEX {name}")
    copied = {}
    for table, columns in tables.items():
        copied[table] = _copy_table(src, dst, table, columns)
        progress(f"{table}: {copied[table]} rows")
    _advance_sequences(dst, tables)
    return copied, [definition for _, definition in plain]


def _copy_table(src: sqlite3.Connection, dst: psycopg.Connection, table: str, columns: list[str]) -> int:
    lexical = table in LEXICAL_SOURCES
    staged = columns + list(LEXICAL_COLUMNS if lexical else ())
    stage = f"cuba_stage_{table}"
    # The target's own column types (so each value is dumped as the type it lands in), but
    # no constraints or indexes: those are checked once, by the INSERT below.
    picked = ", ".join(f"{c}::text AS {c}" if c.startswith("tsv_") else c for c in staged)
    dst.execute(f"CREATE TEMP TABLE {stage} ON COMMIT DROP AS SELECT {picked} FROM {table} WITH NO DATA")
    described = dst.execute(f"SELECT * FROM {stage} LIMIT 0").description
    assert described is not None  # a SELECT always describes its columns
    types = [col.type_code for col in described]
    listed = ", ".join(staged)
    with dst.cursor().copy(f"COPY {stage} ({listed}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(types)
        for row in _source_rows(src, table, columns, lexical):
            copy.write_row(row)
    moved = ", ".join(f"CAST({c} AS tsvector)" if c.startswith("tsv_") else c for c in staged)
    keep = " WHERE key <> ALL(%s)" if table == "meta" else ""  # the target's database settings
    params = (list(DATABASE_META_KEYS),) if keep else ()
    inserted = dst.execute(f"INSERT INTO {table} ({listed}) SELECT {moved} FROM {stage}{keep}", params).rowcount
    dst.execute(f"DROP TABLE {stage}")
    return inserted


def _source_rows(src: sqlite3.Connection, table: str, columns: list[str], lexical: bool) -> Iterator[list]:
    """The table's rows as the target takes them: embeddings as float32 arrays, then (for a
    lexically indexed table) lex_raw, lex_stem and the two tsvector literals."""
    embedding = columns.index("embedding") if "embedding" in columns else None
    picked = ", ".join(f"x.{c}" for c in columns)
    if lexical:  # FTS5's stored texts are the analyzer's output already: no need to redo it
        sql = (f"SELECT {picked}, f.raw, f.stem, {LEXICAL_SOURCES[table]} FROM {table} x"
               f" LEFT JOIN {table}_fts f ON f.rowid = x.seq")
    else:
        sql = f"SELECT {picked} FROM {table} x"
    n = len(columns)
    for row in src.execute(sql):
        values = list(row[:n])
        if embedding is not None and values[embedding] is not None:
            values[embedding] = np.frombuffer(values[embedding], dtype=np.float32)
        if lexical:
            raw, stem = (row[n], row[n + 1]) if row[n] is not None else lexical_texts(row[n + 2] or "")
            values += [raw, stem, tsvector_literal(raw.split()), tsvector_literal(stem.split())]
        yield values


def _advance_sequences(dst: psycopg.Connection, tables: Tables) -> None:
    """Identity columns hand out values past the copied seqs (inserting explicit seqs does not
    move them), so the next row written on PostgreSQL does not collide."""
    identity = dst.execute("SELECT table_name, column_name FROM information_schema.columns"
                           " WHERE table_schema = current_schema() AND is_identity = 'YES'").fetchall()
    for table, column in identity:  # seq, and the id of audit_log and rem_cycles
        if table in tables:
            dst.execute(f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'),"
                        f" (SELECT coalesce(max({column}), 0) + 1 FROM {table}), false)")


def _build_indexes(dst: psycopg.Connection, deferred: list[str], dim: int | None) -> None:
    """The indexes _load set aside, then the HNSW index PgStore makes for the stored model's
    dimension (same name, options and predicate, so the store finds it made)."""
    for definition in deferred:
        dst.execute(definition)
    if dim:
        for table in EMBEDDED_TABLES:
            dst.execute(create_index_sql(table, dim, concurrently=False))


# -- verification ------------------------------------------------------------------------------
def _counts(conn, tables: Tables) -> dict[str, tuple[int, int, int]]:
    """(rows, embedded rows, max seq) per data table: the same SQL on either connection."""
    out = {}
    for table, columns in tables.items():
        if table == "meta":
            continue  # compared by content (_meta)
        embedded = "count(embedding)" if "embedding" in columns else "0"
        top = "coalesce(max(seq), 0)" if "seq" in columns else "0"
        row = conn.execute(f"SELECT count(*), {embedded}, {top} FROM {table}").fetchone()
        out[table] = (int(row[0]), int(row[1]), int(row[2]))
    return out


def _meta(conn) -> dict[str, str]:
    rows = conn.execute("SELECT key, value FROM meta").fetchall()
    return {k: v for k, v in rows if k not in DATABASE_META_KEYS}


def _verify(expected: dict, actual: dict, meta_expected: dict, meta_actual: dict) -> None:
    """Raise (rolling the whole copy back) unless both sides hold the same rows."""
    wrong = [f"{t}: {expected[t]} in SQLite, {actual.get(t)} in PostgreSQL (rows, embedded, max seq)"
             for t in expected if expected[t] != actual.get(t)]
    if meta_expected != meta_actual:
        wrong.append(f"meta: {len(meta_expected)} keys in SQLite, {len(meta_actual)} in PostgreSQL")
    if wrong:
        raise StorageError("the copy did not verify, so it was rolled back and nothing was written: "
                           + "; ".join(wrong),
                           hint="Run migrate again; if it fails the same way, report it as a bug.")
