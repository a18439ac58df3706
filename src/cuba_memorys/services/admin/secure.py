"""`cuba-memorys secure`: the PostgreSQL role row-level security binds."""

from __future__ import annotations

from cuba_memorys.config import Settings
from cuba_memorys.errors import ConfigError
from cuba_memorys.storage import is_postgres_url


def secure(settings: Settings, role: str, password: str | None) -> dict:
    """Create the non-superuser, no-BYPASSRLS role the PostgreSQL server runs as."""
    if not is_postgres_url(settings.database_url):
        raise ConfigError("`secure` sets up a PostgreSQL role; the embedded SQLite store has no"
                          " database roles (projects are separated by the server's own checks).",
                          hint="Set DATABASE_URL=postgresql://… to secure a PostgreSQL memory.")
    from cuba_memorys.storage.postgres.roles import create_app_role
    from cuba_memorys.storage.postgres.store import PgStore

    PgStore(settings.database_url, None).close()  # migrations first: the grants cover every table
    return create_app_role(settings.database_url, role, password)
