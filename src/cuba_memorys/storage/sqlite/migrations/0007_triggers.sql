-- Reminders (cuba_centinela): a message shown when a condition meets a pattern. A trigger
-- fires at most max_fires times (-1: no limit) and never after expires_at; it is switched
-- off (active = 0) when it reaches max_fires or is found expired.
CREATE TABLE triggers (
    id             TEXT PRIMARY KEY,
    entity_pattern TEXT NOT NULL,
    condition_type TEXT NOT NULL
                   CHECK (condition_type IN ('on_access','on_session_start','on_error_match')),
    message        TEXT NOT NULL,
    active         INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
    fire_count     INTEGER NOT NULL DEFAULT 0,
    max_fires      INTEGER NOT NULL DEFAULT 1 CHECK (max_fires = -1 OR max_fires >= 1),
    expires_at     TEXT,
    last_fired_at  TEXT,
    from_agent     TEXT NOT NULL,
    project_id     TEXT REFERENCES projects(id) ON DELETE SET NULL,
    created_at     TEXT NOT NULL
);
CREATE INDEX triggers_armed ON triggers(condition_type, active);
