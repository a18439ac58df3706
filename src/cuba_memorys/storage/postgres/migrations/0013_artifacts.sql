-- Shared, versioned text artifacts between agents (cuba_artefacto; the original's brain_artifacts),
-- as the SQLite migration 0013. A path is unique per project, and once among the rows of no
-- project (NULLs are distinct in a unique index, hence the second, partial index). Paths sort
-- and compare byte-wise (COLLATE "C"), as SQLite's do, so both backends list them alike.
CREATE TABLE artifacts (
    id           TEXT PRIMARY KEY,
    project_id   TEXT REFERENCES projects(id) ON DELETE SET NULL,
    path         TEXT COLLATE "C" NOT NULL,
    content      TEXT NOT NULL,
    content_hash TEXT NOT NULL,               -- sha256 hex of the UTF-8 content
    version      BIGINT NOT NULL DEFAULT 1 CHECK (version >= 1),
    locked_by    TEXT,                        -- the lease holder's client id
    lock_until   TEXT,                        -- the lease's end (ISO 8601 UTC); past it the lease is void
    origin_node  TEXT,
    crdt_actor   TEXT NOT NULL,               -- who wrote the current version
    crdt_counter BIGINT NOT NULL DEFAULT 1,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE UNIQUE INDEX artifacts_project_path ON artifacts(project_id, path) WHERE project_id IS NOT NULL;
CREATE UNIQUE INDEX artifacts_unscoped_path ON artifacts(path) WHERE project_id IS NULL;
CREATE INDEX artifacts_recent ON artifacts(project_id, updated_at);

-- Ours: nothing is lost. Every version a put replaces is kept here (the newest 50 per artifact),
-- readable with cuba_artefacto get version=N. It carries its artifact's project so a project
-- merge moves it along and row-level security covers it as every table.
CREATE TABLE artifact_versions (
    artifact_id  TEXT NOT NULL REFERENCES artifacts(id) ON DELETE CASCADE,
    project_id   TEXT REFERENCES projects(id) ON DELETE SET NULL,
    version      BIGINT NOT NULL,
    content      TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    actor        TEXT NOT NULL,               -- who wrote that version
    origin_node  TEXT,
    written_at   TEXT NOT NULL,               -- when that version was written
    replaced_at  TEXT NOT NULL,               -- when a newer one replaced it
    PRIMARY KEY (artifact_id, version)
);

-- Row-level security as every table with a project: the tenant rule, then the grants' rules.
DO $$
DECLARE
    t TEXT;
BEGIN
    FOREACH t IN ARRAY ARRAY['artifacts', 'artifact_versions'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (cuba_visible(project_id))', t);
        EXECUTE format('CREATE POLICY grant_read ON %I AS RESTRICTIVE FOR SELECT'
                       ' USING (cuba_granted(project_id, ''cuba.readable''))', t);
        EXECUTE format('CREATE POLICY grant_insert ON %I AS RESTRICTIVE FOR INSERT'
                       ' WITH CHECK (cuba_granted(project_id, ''cuba.writable''))', t);
        EXECUTE format('CREATE POLICY grant_update ON %I AS RESTRICTIVE FOR UPDATE'
                       ' USING (cuba_granted(project_id, ''cuba.writable''))', t);
        EXECUTE format('CREATE POLICY grant_delete ON %I AS RESTRICTIVE FOR DELETE'
                       ' USING (cuba_granted(project_id, ''cuba.writable''))', t);
    END LOOP;
END $$;
