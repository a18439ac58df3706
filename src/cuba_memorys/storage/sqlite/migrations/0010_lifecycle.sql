-- Memory lifecycle (issue 13): the audit chain, the bitemporal fact log, entity aliases, the
-- consolidation cycles' record, and what a superseded observation was before.

-- Hash-chained audit log (cuba_archivo). Rows are never changed or removed: the triggers
-- below refuse UPDATE and DELETE from every connection, the server's included.
CREATE TABLE audit_log (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    prev_hash    TEXT NOT NULL,
    action       TEXT NOT NULL,
    payload      TEXT NOT NULL DEFAULT '{}',
    current_hash TEXT NOT NULL,
    project_id   TEXT,
    created_at   TEXT NOT NULL
);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;

-- One fact per observation version: what the memory held true from valid_from until
-- valid_to (NULL: still). A correction, merge, summary or supersession closes the fact.
CREATE TABLE facts (
    fact_id           TEXT PRIMARY KEY,
    subject_entity_id TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    observation_id    TEXT REFERENCES observations(id) ON DELETE CASCADE,
    project_id        TEXT REFERENCES projects(id) ON DELETE SET NULL,
    subject           TEXT NOT NULL,
    predicate         TEXT NOT NULL,
    object            TEXT NOT NULL,
    valid_from        TEXT NOT NULL,
    valid_to          TEXT,
    observed_at       TEXT NOT NULL,
    confidence        REAL NOT NULL DEFAULT 1 CHECK (confidence BETWEEN 0 AND 1),
    is_current        INTEGER NOT NULL DEFAULT 1,
    created_at        TEXT NOT NULL,
    CHECK (valid_to IS NULL OR valid_from <= valid_to),
    CHECK (is_current = 0 OR valid_to IS NULL)
);
CREATE INDEX facts_observation ON facts(observation_id);
CREATE INDEX facts_subject ON facts(subject_entity_id);
CREATE INDEX facts_current ON facts(is_current, project_id);

CREATE TABLE fact_supersedes (
    old_fact_id   TEXT NOT NULL REFERENCES facts(fact_id) ON DELETE CASCADE,
    new_fact_id   TEXT REFERENCES facts(fact_id) ON DELETE CASCADE,
    reason        TEXT NOT NULL,
    superseded_at TEXT NOT NULL
);
CREATE INDEX fact_supersedes_old ON fact_supersedes(old_fact_id);

-- Every observation already stored starts its history now: current rows from when they were
-- written, superseded ones closed when they were superseded.
INSERT INTO facts (fact_id, subject_entity_id, observation_id, project_id, subject, predicate, object,
                   valid_from, valid_to, observed_at, confidence, is_current, created_at)
SELECT 'f-' || o.id, o.entity_id, o.id, o.project_id, e.name, o.observation_type, o.content,
       o.created_at, CASE WHEN o.observation_type = 'superseded' THEN max(o.updated_at, o.created_at) END,
       o.created_at, o.importance, CASE WHEN o.observation_type = 'superseded' THEN 0 ELSE 1 END, o.created_at
FROM observations o JOIN entities e ON e.id = o.entity_id;

-- A superseded row remembers its type and what replaced it, so a merge or summary can be undone.
ALTER TABLE observations ADD COLUMN superseded_from TEXT;
ALTER TABLE observations ADD COLUMN superseded_by TEXT;

-- Names an entity was also known by (a merged entity's name): every tool still resolves them.
CREATE TABLE entity_aliases (
    alias_id        TEXT PRIMARY KEY,
    entity_id       TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    alias_text      TEXT NOT NULL,
    language_code   TEXT NOT NULL DEFAULT 'es',
    frequency_count INTEGER NOT NULL DEFAULT 0,
    last_used       TEXT,
    project_id      TEXT REFERENCES projects(id) ON DELETE SET NULL,
    created_at      TEXT NOT NULL,
    UNIQUE (entity_id, alias_text)
);
CREATE INDEX entity_aliases_text ON entity_aliases(alias_text);

-- One row per consolidation cycle (the latest 500 are kept).
CREATE TABLE rem_cycles (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at            TEXT NOT NULL,
    finished_at           TEXT NOT NULL,
    duration_ms           INTEGER NOT NULL,
    decayed_count         INTEGER NOT NULL DEFAULT 0,
    episodes_decayed      INTEGER NOT NULL DEFAULT 0,
    protected_entities    INTEGER NOT NULL DEFAULT 0,
    embeddings_backfilled INTEGER NOT NULL DEFAULT 0,
    duplicate_candidates  INTEGER NOT NULL DEFAULT 0,
    autolink_edges        INTEGER NOT NULL DEFAULT 0,
    entities_scanned      INTEGER NOT NULL DEFAULT 0,
    facts_extracted       INTEGER NOT NULL DEFAULT 0,
    communities           INTEGER NOT NULL DEFAULT 0,
    relation_scan_failed  INTEGER NOT NULL DEFAULT 0,
    extraction_failed     INTEGER NOT NULL DEFAULT 0,
    error                 TEXT,
    trigger               TEXT NOT NULL DEFAULT 'schedule'
);
CREATE TRIGGER rem_cycles_keep_500 AFTER INSERT ON rem_cycles BEGIN
    DELETE FROM rem_cycles WHERE id <= new.id - 500;
END;
