-- Working memory (cuba_pizarra) and procedures (cuba_receta), as sqlite migrations 0004.
-- Decisions (cuba_decreto) are observations of type 'decision' and need no table of their own.

CREATE TABLE working_memory (
    id          TEXT PRIMARY KEY,
    client_id   TEXT NOT NULL,
    session_id  TEXT REFERENCES sessions(id) ON DELETE CASCADE,
    project_id  TEXT REFERENCES projects(id) ON DELETE SET NULL,
    content     TEXT NOT NULL,
    tag         TEXT,
    ttl_seconds INTEGER NOT NULL CHECK (ttl_seconds > 0),
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL
);
CREATE INDEX working_memory_owner ON working_memory(client_id, expires_at);
CREATE INDEX working_memory_expiry ON working_memory(expires_at);

CREATE TABLE procedures (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    trigger_context TEXT,
    steps           TEXT NOT NULL DEFAULT '[]',
    preconditions   TEXT,
    verification    TEXT,
    success_count   INTEGER NOT NULL DEFAULT 0,
    failure_count   INTEGER NOT NULL DEFAULT 0,
    last_outcome    TEXT CHECK (last_outcome IS NULL OR last_outcome IN ('success','failure')),
    last_used_at    TEXT,
    project_id      TEXT REFERENCES projects(id) ON DELETE SET NULL,
    origin_node     TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE UNIQUE INDEX procedures_name_project ON procedures(name, coalesce(project_id, ''));

ALTER TABLE working_memory ENABLE ROW LEVEL SECURITY;
ALTER TABLE working_memory FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON working_memory USING (cuba_visible(project_id));
ALTER TABLE procedures ENABLE ROW LEVEL SECURITY;
ALTER TABLE procedures FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON procedures USING (cuba_visible(project_id));
