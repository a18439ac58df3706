-- Shared, versioned text artifacts between agents (cuba_artefacto; the original's brain_artifacts).
-- A path is unique per project, and once among the rows of no project (SQLite's unique indexes,
-- like PostgreSQL's, treat NULLs as distinct, hence the second, partial index).
CREATE TABLE artifacts (
    id           TEXT PRIMARY KEY,
    project_id   TEXT REFERENCES projects(id) ON DELETE SET NULL,
    path         TEXT NOT NULL,
    content      TEXT NOT NULL,
    content_hash TEXT NOT NULL,               -- sha256 hex of the UTF-8 content
    version      INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
    locked_by    TEXT,                        -- the lease holder's client id
    lock_until   TEXT,                        -- the lease's end (ISO 8601 UTC); past it the lease is void
    origin_node  TEXT,
    crdt_actor   TEXT NOT NULL,               -- who wrote the current version
    crdt_counter INTEGER NOT NULL DEFAULT 1,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE UNIQUE INDEX artifacts_project_path ON artifacts(project_id, path) WHERE project_id IS NOT NULL;
CREATE UNIQUE INDEX artifacts_unscoped_path ON artifacts(path) WHERE project_id IS NULL;
CREATE INDEX artifacts_recent ON artifacts(project_id, updated_at);

-- Ours: nothing is lost. Every version a put replaces is kept here (the newest 50 per artifact),
-- readable with cuba_artefacto get version=N. It carries its artifact's project so a project
-- merge moves it along and, on PostgreSQL, row-level security covers it as every table.
CREATE TABLE artifact_versions (
    artifact_id  TEXT NOT NULL REFERENCES artifacts(id) ON DELETE CASCADE,
    project_id   TEXT REFERENCES projects(id) ON DELETE SET NULL,
    version      INTEGER NOT NULL,
    content      TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    actor        TEXT NOT NULL,               -- who wrote that version
    origin_node  TEXT,
    written_at   TEXT NOT NULL,               -- when that version was written
    replaced_at  TEXT NOT NULL,               -- when a newer one replaced it
    PRIMARY KEY (artifact_id, version)
);
