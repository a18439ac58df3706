"""What the SQLite and PostgreSQL stores share: every family's SQL, written once.

Both backends run the same statements (``?`` placeholders; the PostgreSQL connection turns
them into its own), so every behaviour is the same by construction. Each family's SQL is its
own module (graph, observations, search, grounding, workflow, sessions, incidents,
reminders), all built on the leaf ``common``; :class:`SqlStore` combines them with the store's
metadata. What genuinely differs lives in the hooks of ``common.SqlBase`` that each backend
defines: how the lexical index is written, how an embedding is passed and read back, what
happens to an in-memory vector index after a commit.
"""

from __future__ import annotations

from cuba_memorys.storage.rows import IndexBuilds
from cuba_memorys.storage.sql.access import SqlAccess
from cuba_memorys.storage.sql.agents import SqlAgents
from cuba_memorys.storage.sql.aliases import SqlAliases
from cuba_memorys.storage.sql.analysis import SqlAnalysis
from cuba_memorys.storage.sql.anchors import SqlAnchors
from cuba_memorys.storage.sql.artifacts import SqlArtifacts
from cuba_memorys.storage.sql.audit import SqlAudit
from cuba_memorys.storage.sql.calibration import SqlCalibration
from cuba_memorys.storage.sql.codegraph import SqlCodegraph
from cuba_memorys.storage.sql.common import COUNTED_TABLES
from cuba_memorys.storage.sql.exports import SqlExports
from cuba_memorys.storage.sql.facts import SqlFacts
from cuba_memorys.storage.sql.forget import SqlForget
from cuba_memorys.storage.sql.graph import SqlGraph
from cuba_memorys.storage.sql.grounding import SqlGrounding
from cuba_memorys.storage.sql.health import SqlHealth
from cuba_memorys.storage.sql.incidents import SqlIncidents
from cuba_memorys.storage.sql.lifecycle import SqlLifecycle
from cuba_memorys.storage.sql.observations import SqlObservations
from cuba_memorys.storage.sql.reasoning import SqlReasoning
from cuba_memorys.storage.sql.rem import SqlRem
from cuba_memorys.storage.sql.reminders import SqlReminders
from cuba_memorys.storage.sql.sessions import SqlSessions
from cuba_memorys.storage.sql.sync import SqlSync
from cuba_memorys.storage.sql.sync_import import SqlSyncImport
from cuba_memorys.storage.sql.sync_peers import SqlSyncPeers
from cuba_memorys.storage.sql.undo import SqlUndo
from cuba_memorys.storage.sql.workflow import SqlWorkflow


class SqlStore(SqlGraph, SqlObservations, SqlGrounding, SqlWorkflow, SqlSessions, SqlIncidents, SqlReminders,
               SqlAccess, SqlAudit, SqlFacts, SqlLifecycle, SqlAliases, SqlUndo, SqlForget, SqlHealth,
               SqlRem, SqlReasoning, SqlCalibration, SqlAnalysis, SqlAgents, SqlArtifacts,
               SqlSync, SqlSyncImport, SqlSyncPeers, SqlExports, SqlAnchors, SqlCodegraph):
    """The shared half of a store. A backend provides the connection (``_q``, ``_one``,
    ``_exec``, ``transaction``, ``_after_commit``), its search primitives and the hooks of
    ``SqlBase``."""

    def build_indexes_in_background(self) -> None:
        """A long-running server's cue to build large missing indexes (PostgreSQL); no-op here."""

    def index_builds(self) -> IndexBuilds:
        """Indexes not in place: {"missing": [...], "building": [...], "failed": {name: why}}."""
        return {"missing": [], "building": [], "failed": {}}

    # -- metadata -----------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self._exec("INSERT INTO meta(key, value) VALUES (?, ?) "
                   "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def counts(self) -> dict[str, int]:
        return {t: self._one(f"SELECT count(*) FROM {t}")[0] for t in COUNTED_TABLES}
