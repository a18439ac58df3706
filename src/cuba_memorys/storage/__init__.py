"""Storage: one Protocol (:class:`Store`) and one factory (:func:`open_store`)."""

from __future__ import annotations

from ..config import Settings
from ..errors import ConfigError
from .base import Store

__all__ = ["Store", "open_store"]


def open_store(settings: Settings, embedding_dim: int | None) -> Store:
    """The embedded SQLite store, or PostgreSQL when DATABASE_URL names one.

    ``embedding_dim`` sizes the vector index; None when no embedding model is loaded.
    """
    url = settings.database_url
    if url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            "DATABASE_URL points to PostgreSQL, but this build has no PostgreSQL backend yet.",
            hint="Unset DATABASE_URL to use the embedded SQLite store in CUBA_DATA_DIR.",
        )
    if url and not url.startswith("sqlite:"):
        raise ConfigError(f"DATABASE_URL must start with postgresql:// or sqlite:/// (got {url.split(':')[0]}:…).")
    from .sqlite_store import SqliteStore

    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else settings.sqlite_path
    return SqliteStore(path, embedding_dim, ann_min_rows=settings.ann_min_rows)
