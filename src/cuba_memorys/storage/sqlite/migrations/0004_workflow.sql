-- Working memory (cuba_pizarra) and procedures (cuba_receta). Decisions (cuba_decreto) are
-- observations of type 'decision' and need no table of their own.

-- Short-lived notes of one client (its session once sessions exist). A row whose expires_at
-- has passed is never returned and is deleted on the next write or read.
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

-- Recipes: one per name and project; reliability is computed from the two counts.
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
CREATE UNIQUE INDEX procedures_name_project ON procedures(name, ifnull(project_id, ''));
