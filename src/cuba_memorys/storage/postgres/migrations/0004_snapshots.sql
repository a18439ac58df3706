-- cuba_pre_compact: what a session knew, saved before the agent's context is compacted.
CREATE TABLE compaction_snapshots (
    id                 TEXT PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    project_id         TEXT REFERENCES projects(id) ON DELETE SET NULL,
    summary_md         TEXT NOT NULL,
    key_observations   TEXT NOT NULL DEFAULT '[]',
    decisions          TEXT NOT NULL DEFAULT '[]',
    unresolved_errors  TEXT NOT NULL DEFAULT '[]',
    pending_embeddings TEXT NOT NULL DEFAULT '[]',
    active_goals       TEXT NOT NULL DEFAULT '[]',
    obs_count          INTEGER NOT NULL DEFAULT 0,
    created_at         TEXT NOT NULL
);
CREATE INDEX compaction_snapshots_session ON compaction_snapshots(session_id, created_at);

ALTER TABLE compaction_snapshots ENABLE ROW LEVEL SECURITY;
ALTER TABLE compaction_snapshots FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON compaction_snapshots USING (cuba_visible(project_id));
