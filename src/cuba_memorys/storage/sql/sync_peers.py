"""Shared SQL of read-only sync peers (cuba_sync pull, notify, fetch; services/sync/peers.py):
peers' notices, the peers this store pulls from, and a cheap marker of "the store changed".
Same ``?`` SQL on SQLite and PostgreSQL (tables of migration 0014).
"""

from __future__ import annotations

from typing import Any

from cuba_memorys.storage.sql.common import SqlBase

Row = dict[str, Any]
PEER_FIELDS = "name, url, last_manifest_hash, last_synced_at, last_error"


class SqlSyncPeers(SqlBase):
    """Mixed into SqlStore."""

    def sync_change_marker(self) -> str:
        """A value that moves whenever the store may have changed, read without touching any table,
        so a paged pull knows whether its cached export is still the store's state. It may move
        without a change (then the export is redone and found equal), never the reverse.

        SQLite: the connection's count of rows changed (its own writes, triggers included) and
        ``PRAGMA data_version`` (another connection's commits). PostgreSQL: the write-ahead log's
        position (every committed write moves it; so do other databases' writes and vacuum)."""
        if self.backend == "postgresql":
            row = self._one("SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
                            " ELSE pg_current_wal_lsn() END)::text")
            return f"wal:{row[0]}"
        changed = self._one("SELECT total_changes()")
        version = self._one("PRAGMA data_version")
        return f"sqlite:{changed[0]}:{version[0]}"

    # -- notices a peer sent (cuba_sync notify) -------------------------------------------------
    def peer_notice_insert(self, notice_id: str, node_id: str, node_name: str | None, manifest_hash: str | None,
                           summary: str, created_at: str, closed_at: str | None, keep: int) -> int:
        """Record a notice, then drop that node's oldest beyond ``keep``; returns how many were dropped."""
        self._exec("INSERT INTO peer_notices(id, node_id, node_name, manifest_hash, summary, created_at, closed_at)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (notice_id, node_id, node_name, manifest_hash, summary, created_at, closed_at))
        dropped = self._exec("DELETE FROM peer_notices WHERE node_id = ? AND id NOT IN (SELECT id FROM peer_notices"
                             " WHERE node_id = ? ORDER BY created_at DESC, id DESC LIMIT ?)",
                             (node_id, node_id, keep))
        return max(int(dropped.rowcount or 0), 0)

    def peer_notice_count(self, node_id: str | None) -> int:
        """How many notices (open or closed) are kept, of one node or of all."""
        if node_id is None:
            row = self._one("SELECT count(*) FROM peer_notices")
        else:
            row = self._one("SELECT count(*) FROM peer_notices WHERE node_id = ?", (node_id,))
        return int(row[0])

    # -- the peers this store pulls from (cuba_sync fetch) --------------------------------------
    def peer_get(self, name: str) -> Row | None:
        row = self._one(f"SELECT {PEER_FIELDS} FROM sync_peers WHERE name = ?", (name,))
        return None if row is None else dict(row)

    def peer_list(self, limit: int) -> list[Row]:
        return [dict(r) for r in self._q(f"SELECT {PEER_FIELDS} FROM sync_peers ORDER BY name LIMIT ?", (limit,))]

    def peer_synced(self, name: str, url: str, manifest_hash: str, synced_at: str) -> None:
        """A pull that worked: the peer's url, the bundle taken and when; its last error cleared."""
        self._exec("INSERT INTO sync_peers(name, url, last_manifest_hash, last_synced_at, last_error)"
                   " VALUES (?, ?, ?, ?, NULL) ON CONFLICT(name) DO UPDATE SET url = excluded.url,"
                   " last_manifest_hash = excluded.last_manifest_hash, last_synced_at = excluded.last_synced_at,"
                   " last_error = NULL", (name, url, manifest_hash, synced_at))

    def peer_failed(self, name: str, url: str, error: str) -> None:
        """A pull that failed: its error, keeping the peer's stored url and the last bundle taken (so a
        mistyped url does not replace a good one, and the next pull is compared to the last)."""
        self._exec("INSERT INTO sync_peers(name, url, last_error) VALUES (?, ?, ?)"
                   " ON CONFLICT(name) DO UPDATE SET last_error = excluded.last_error",
                   (name, url, error))
