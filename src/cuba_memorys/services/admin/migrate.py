"""`migrate`: move the embedded memory up to PostgreSQL (the copy itself is storage/migrate.py)."""

from __future__ import annotations

from collections.abc import Callable

from cuba_memorys.config import Settings
from cuba_memorys.errors import InvalidInput
from cuba_memorys.storage import is_postgres_url


def to_postgres(settings: Settings, target: object, *, force: bool = False,
                progress: Callable[[str], None] | None = None) -> dict:
    """Copy the settings' SQLite memory into the PostgreSQL database ``target`` (a URL), in one
    transaction, and verify it. Refuses a target that already holds a memory unless ``force``."""
    if not isinstance(target, str) or not is_postgres_url(target.strip()):
        scheme = target.split(":", 1)[0] if isinstance(target, str) and ":" in target else target
        raise InvalidInput("--to", f"must be a PostgreSQL URL (got {scheme!r})",
                           "postgresql://user:password@host:port/database")
    # Imported here: psycopg and the PostgreSQL store load only when a migration runs.
    from cuba_memorys.storage.migrate import copy_to_postgres, sqlite_source

    return copy_to_postgres(sqlite_source(settings), target.strip(), force=force, progress=progress)
