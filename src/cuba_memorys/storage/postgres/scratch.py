"""Throw-away PostgreSQL databases, for evaluations that need one fresh store per dataset part.

Created on the server DATABASE_URL names (the login needs CREATEDB) and dropped afterwards,
so an evaluation never touches the memory stored in the database the URL points to.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from cuba_memorys.storage.postgres.db import storage_error

_numbers = itertools.count(1)


@contextmanager
def scratch_database(url: str) -> Iterator[str]:
    """Yield the URL of a new empty database on ``url``'s server; drop it on exit."""
    name = f"cuba_scratch_{os.getpid()}_{next(_numbers)}"
    _admin(url, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        parts = urlsplit(url)
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        _admin(url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _admin(url: str, statement: sql.Composed) -> None:
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(statement)
    except psycopg.Error as exc:
        raise storage_error(exc, url) from exc
