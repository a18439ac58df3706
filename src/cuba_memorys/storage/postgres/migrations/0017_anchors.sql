-- As the SQLite migration 0017. Memories anchored to code (issue 19): each row ties one observation to a span of a file in a
-- git repository, as it read when the memory was written (commit, lines, the hash of the span's
-- normalised text), and what the last check found (status, when, since which commit it changed).
-- An observation's anchors go with it (ON DELETE CASCADE: cuba_cronica delete, forget, a sync
-- tombstone); undo files hold them with the observation, so an undo puts them back too.
CREATE TABLE observation_anchors (
    id                TEXT PRIMARY KEY,
    observation_id    TEXT NOT NULL REFERENCES observations(id) ON DELETE CASCADE,
    project_id        TEXT REFERENCES projects(id) ON DELETE SET NULL,
    repo_root         TEXT NOT NULL,               -- absolute, resolved, as the writer saw it
    commit_sha        TEXT,                        -- HEAD when anchored (None: an unborn branch)
    path              TEXT NOT NULL,               -- posix, relative to repo_root
    symbol            TEXT,                        -- qualified name (code/symbols.py), or None
    line_start        BIGINT NOT NULL,
    line_end          BIGINT NOT NULL,
    span_hash         TEXT NOT NULL,               -- code/spans.py span_hash of the lines
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,               -- the last re-anchoring (moved, corrected)
    status            TEXT,                        -- fresh|moved|changed|missing|unverifiable
    status_checked_at TEXT,
    changed_since     TEXT                         -- the first commit that changed the span
);
CREATE INDEX observation_anchors_observation ON observation_anchors(observation_id);
CREATE INDEX observation_anchors_path ON observation_anchors(path);
CREATE INDEX observation_anchors_project ON observation_anchors(project_id, status);

-- Row-level security as every table with a project: the tenant rule, then the grants' rules.
DO $$
BEGIN
    ALTER TABLE observation_anchors ENABLE ROW LEVEL SECURITY;
    ALTER TABLE observation_anchors FORCE ROW LEVEL SECURITY;
    CREATE POLICY tenant_isolation ON observation_anchors USING (cuba_visible(project_id));
    CREATE POLICY grant_read ON observation_anchors AS RESTRICTIVE FOR SELECT
        USING (cuba_granted(project_id, 'cuba.readable'));
    CREATE POLICY grant_insert ON observation_anchors AS RESTRICTIVE FOR INSERT
        WITH CHECK (cuba_granted(project_id, 'cuba.writable'));
    CREATE POLICY grant_update ON observation_anchors AS RESTRICTIVE FOR UPDATE
        USING (cuba_granted(project_id, 'cuba.writable'));
    CREATE POLICY grant_delete ON observation_anchors AS RESTRICTIVE FOR DELETE
        USING (cuba_granted(project_id, 'cuba.writable'));
END $$;
