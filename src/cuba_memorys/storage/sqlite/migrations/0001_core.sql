-- Core knowledge graph: projects, entities, observations, relations, sessions, episodes, errors.
-- Ids are UUID strings (the original's ids); `seq` is a stable integer key used by the
-- full-text and vector indexes (an INTEGER PRIMARY KEY survives VACUUM, a bare rowid may not).

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE projects (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    created_at     TEXT NOT NULL,
    last_active_at TEXT NOT NULL
);

CREATE TABLE entities (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    name         TEXT NOT NULL,
    entity_type  TEXT NOT NULL DEFAULT 'concept'
                 CHECK (entity_type IN ('concept','project','technology','person','pattern','config')),
    importance   REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    access_count INTEGER NOT NULL DEFAULT 0,
    bcm_theta    REAL NOT NULL DEFAULT 10,
    project_id   TEXT REFERENCES projects(id) ON DELETE SET NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE INDEX entities_project ON entities(project_id);
-- Names are unique within a project (and among unscoped entities), so two projects can each
-- have their own "auth" without seeing each other's.
CREATE UNIQUE INDEX entities_name_project ON entities(name, ifnull(project_id, ''));

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    goals      TEXT NOT NULL DEFAULT '[]',
    summary    TEXT,
    outcome    TEXT CHECK (outcome IS NULL OR outcome IN ('success','partial','failed','abandoned')),
    client_id  TEXT,
    project_id TEXT REFERENCES projects(id) ON DELETE SET NULL,
    started_at TEXT NOT NULL,
    ended_at   TEXT
);

CREATE TABLE observations (
    seq               INTEGER PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    entity_id         TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    content           TEXT NOT NULL CHECK (length(content) BETWEEN 1 AND 10000),
    observation_type  TEXT NOT NULL DEFAULT 'fact'
                      CHECK (observation_type IN ('fact','decision','lesson','preference','error',
                                                  'solution','context','tool_usage','superseded')),
    importance        REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    access_count      INTEGER NOT NULL DEFAULT 0,
    last_accessed     TEXT,
    last_decayed_at   TEXT,
    source            TEXT NOT NULL DEFAULT 'agent'
                      CHECK (source IN ('agent','error_detection','user','consolidation','inference')),
    version           INTEGER NOT NULL DEFAULT 1,
    previous_versions TEXT NOT NULL DEFAULT '[]',
    embedding         BLOB,
    embedding_model   TEXT,
    embedding_rev     INTEGER NOT NULL DEFAULT 0,
    tags              TEXT NOT NULL DEFAULT '[]',
    session_id        TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    project_id        TEXT REFERENCES projects(id) ON DELETE SET NULL,
    origin_node       TEXT,
    trust             TEXT NOT NULL DEFAULT 'trusted' CHECK (trust IN ('trusted','quarantined')),
    evidence          TEXT NOT NULL DEFAULT 'asserted' CHECK (evidence IN ('asserted','observed','verified')),
    verification      TEXT,
    verified_at       TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);
CREATE INDEX observations_entity ON observations(entity_id);
CREATE INDEX observations_project ON observations(project_id);
CREATE INDEX observations_created ON observations(created_at);
CREATE INDEX observations_unembedded ON observations(seq) WHERE embedding IS NULL;

CREATE TABLE relations (
    id             TEXT PRIMARY KEY,
    from_entity_id TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    to_entity_id   TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    relation_type  TEXT NOT NULL DEFAULT 'related_to'
                   CHECK (relation_type IN ('uses','causes','implements','depends_on','related_to')),
    strength       REAL NOT NULL DEFAULT 0.5 CHECK (strength BETWEEN 0 AND 1),
    bidirectional  INTEGER NOT NULL DEFAULT 0,
    last_traversed TEXT,
    provenance     TEXT NOT NULL DEFAULT 'extracted' CHECK (provenance IN ('extracted','inferred','predicted')),
    project_id     TEXT REFERENCES projects(id) ON DELETE SET NULL,
    created_at     TEXT NOT NULL,
    UNIQUE (from_entity_id, to_entity_id, relation_type)
);
CREATE INDEX relations_to ON relations(to_entity_id);

CREATE TABLE episodes (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    entity_id     TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    content       TEXT NOT NULL CHECK (length(content) BETWEEN 1 AND 10000),
    started_at    TEXT NOT NULL,
    ended_at      TEXT,
    actors        TEXT NOT NULL DEFAULT '[]',
    artifacts     TEXT NOT NULL DEFAULT '[]',
    importance    REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    embedding     BLOB,
    embedding_model TEXT,
    embedding_rev INTEGER NOT NULL DEFAULT 0,
    session_id    TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    project_id    TEXT REFERENCES projects(id) ON DELETE SET NULL,
    trust         TEXT NOT NULL DEFAULT 'trusted' CHECK (trust IN ('trusted','quarantined')),
    created_at    TEXT NOT NULL
);
CREATE INDEX episodes_entity ON episodes(entity_id);

CREATE TABLE errors (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    error_type     TEXT NOT NULL,
    error_message  TEXT NOT NULL,
    context        TEXT NOT NULL DEFAULT '{}',
    project        TEXT NOT NULL DEFAULT 'default',
    project_id     TEXT REFERENCES projects(id) ON DELETE SET NULL,
    solution       TEXT,
    resolved       INTEGER NOT NULL DEFAULT 0,
    synapse_weight REAL NOT NULL DEFAULT 1.0,
    resolved_at    TEXT,
    trust          TEXT NOT NULL DEFAULT 'trusted' CHECK (trust IN ('trusted','quarantined')),
    session_id     TEXT REFERENCES sessions(id) ON DELETE SET NULL,
    created_at     TEXT NOT NULL
);

-- Lexical indexes. `raw` holds folded words (the text branch, trigram-scored afterwards);
-- `stem` holds text.analyze() output (the BM25 branch). Kept in step by the store's code,
-- not by triggers, because the analyzer is Python.
CREATE VIRTUAL TABLE observations_fts USING fts5(raw, stem, tokenize = 'unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE entities_fts USING fts5(raw, stem, tokenize = 'unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE episodes_fts USING fts5(raw, stem, tokenize = 'unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE errors_fts USING fts5(raw, stem, tokenize = 'unicode61 remove_diacritics 2');

-- Deletes can arrive through ON DELETE CASCADE, which Python never sees: triggers keep the
-- lexical indexes free of orphans.
CREATE TRIGGER observations_fts_delete AFTER DELETE ON observations BEGIN
    DELETE FROM observations_fts WHERE rowid = old.seq;
END;
CREATE TRIGGER entities_fts_delete AFTER DELETE ON entities BEGIN
    DELETE FROM entities_fts WHERE rowid = old.seq;
END;
CREATE TRIGGER episodes_fts_delete AFTER DELETE ON episodes BEGIN
    DELETE FROM episodes_fts WHERE rowid = old.seq;
END;
CREATE TRIGGER errors_fts_delete AFTER DELETE ON errors BEGIN
    DELETE FROM errors_fts WHERE rowid = old.seq;
END;
