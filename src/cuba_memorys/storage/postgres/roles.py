"""The application role row-level security needs (`cuba-memorys secure`).

PostgreSQL skips row-level security for superusers and BYPASSRLS roles, so a server that
logs in as `postgres` would see every project's rows whatever policy exists. `secure`
creates a role that is neither, grants it what the server needs in this database, and
records it in the database's `meta` table; from then on the store switches every pooled
connection to it (SET ROLE) when its login may, so the policies bind even a superuser login.
Migrations and index builds still run as the login, which owns the schema.
"""

from __future__ import annotations

import secrets

import psycopg
from psycopg import sql

from cuba_memorys.errors import InvalidInput
from cuba_memorys.storage.postgres.db import APP_ROLE, one_value, redact, storage_error

META_KEY = "app_role"  # meta row naming the role this database's server should run as


def create_app_role(url: str, role: str = APP_ROLE, password: str | None = None) -> dict:
    """Create (or re-check) the NOSUPERUSER NOBYPASSRLS role and grant it this database."""
    if not role.isidentifier() or len(role) > 63:
        raise InvalidInput("role", f"{role!r} is not a plain SQL identifier", "letters, digits and _")
    secret = password or secrets.token_urlsafe(24)
    try:
        with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
            created = _ensure_role(conn, role, secret)
            _grant(conn, role)
            conn.execute("INSERT INTO meta(key, value) VALUES (%s, %s)"
                         " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (META_KEY, role))
            login = one_value(conn.execute("SELECT current_user"))
    except psycopg.Error as exc:
        raise storage_error(exc, url) from exc
    return {
        "role": role, "created": created, "granted_to_login": login,
        "password": secret if created or password else None,
        "url": _url_for(url, role, secret) if created or password else None,
        "note": (f"The server now switches to {role} (SET ROLE) on every connection, so row-level"
                 f" security binds it even though it logs in as {login}. To log in as {role}"
                 " directly, use the url shown (the password is shown only now)."),
    }


def _ensure_role(conn: psycopg.Connection, role: str, secret: str) -> bool:
    ident = sql.Identifier(role)
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if exists:
        # An existing role keeps its password; it is made safe again in case it was changed.
        conn.execute(sql.SQL("ALTER ROLE {} NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE").format(ident))
    else:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE"
                             " PASSWORD {}").format(ident, sql.Literal(secret)))
    return not exists


def _grant(conn: psycopg.Connection, role: str) -> None:
    ident = sql.Identifier(role)
    database = one_value(conn.execute("SELECT current_database()"))
    for statement in (
        "GRANT CONNECT ON DATABASE {db} TO {r}",
        "GRANT USAGE ON SCHEMA public TO {r}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {r}",
        "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {r}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {r}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {r}",
        # The audit chain is append-only for the application (its trigger refuses too).
        "REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM {r}",
    ):
        conn.execute(sql.SQL(statement).format(db=sql.Identifier(database), r=ident))
    # The login must be a member to SET ROLE (a superuser is one implicitly).
    member = one_value(conn.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (role,)))
    if not member:
        conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(ident))


def _url_for(url: str, role: str, secret: str) -> str:
    from urllib.parse import quote, urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{quote(role)}:{quote(secret, safe='')}@{host}"))


def switch_to_app_role(conn: psycopg.Connection) -> None:
    """Pool configure step: SET ROLE to the database's recorded app role when allowed."""
    row = conn.execute(
        "SELECT m.value, pg_has_role(current_user, r.oid, 'MEMBER') FROM meta m"
        " JOIN pg_roles r ON r.rolname = m.value WHERE m.key = %s", (META_KEY,)).fetchone()
    if row and row[1] and row[0] != one_value(conn.execute("SELECT current_user")):
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(row[0])))


__all__ = ["create_app_role", "switch_to_app_role", "redact"]
