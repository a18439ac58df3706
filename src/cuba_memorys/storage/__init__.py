"""Storage: one Protocol (:class:`Store`) and one factory (:func:`open_store`)."""

from __future__ import annotations

from cuba_memorys.config import Settings, default_data_dir
from cuba_memorys.errors import ConfigError
from cuba_memorys.storage.protocols import Store

__all__ = ["Store", "open_store", "is_postgres_url", "prepare_location"]


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def prepare_location(settings: Settings) -> None:
    """Make sure the embedded store can live where the settings put it: its folder created and
    writable, its file a SQLite database (or new). Cheap, so it runs before the embedding model
    loads; a problem is one StorageError saying what is wrong and what to do."""
    url = settings.database_url
    if is_postgres_url(url):
        return
    if url and not url.startswith("sqlite:"):
        raise ConfigError(f"DATABASE_URL must start with postgresql:// or sqlite:/// (got {url.split(':')[0]}:…).")
    from cuba_memorys.storage.sqlite import files

    path = settings.sqlite_path
    setting = "DATABASE_URL" if url else "CUBA_DATA_DIR"
    files.prepare_folder(path.parent, setting, default=None if url else default_data_dir())
    files.check_header(path)


def open_store(settings: Settings, embedding_dim: int | None) -> Store:
    """The embedded SQLite store, or PostgreSQL when DATABASE_URL names one.

    ``embedding_dim`` sizes the vector index; None when no embedding model is loaded.
    """
    url = settings.database_url
    if is_postgres_url(url):
        from cuba_memorys.storage.postgres.store import (
            PgStore,  # psycopg is only imported when PostgreSQL is used
        )

        return PgStore(url, embedding_dim, max_connections=settings.db_max_connections,
                       origin_node=settings.origin_node)
    prepare_location(settings)
    from cuba_memorys.storage.sqlite.store import SqliteStore

    store = SqliteStore(settings.sqlite_path, embedding_dim, ann_min_rows=settings.ann_min_rows)
    store.origin_node = settings.origin_node
    return store
