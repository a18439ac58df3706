-- Sync between machines (cuba_sync, issue 17): the store's node id, the tombstones that let a
-- delete travel in a bundle, the bundles imported, the conflicts an import opens, peers and
-- their notices. Columns follow the original's schema (original-system.md §3, 0.27 §4e).

-- The node id is made once, here, when the migration runs (so every store has one from its
-- first open, and `cuba-memorys migrate` carries it over with the rest of meta): a random
-- UUID (version 4 layout).
INSERT INTO meta(key, value)
SELECT 'node_id', lower(substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-'
       || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(h, 18, 3) || '-' || substr(h, 21, 12))
FROM (SELECT hex(randomblob(16)) AS h)
WHERE NOT EXISTS (SELECT 1 FROM meta WHERE key = 'node_id');

-- One row per deleted row of the eight synced tables: only ids, never content, so a forgotten
-- entity leaves no trace of what it said. project_id (ours, not in the bundle's format) is the
-- deleted row's project, so a project-scoped export carries only its own tombstones.
CREATE TABLE tombstones (
    table_name  TEXT NOT NULL,
    row_id      TEXT NOT NULL,
    deleted_at  TEXT NOT NULL,
    origin_node TEXT,
    project_id  TEXT,
    PRIMARY KEY (table_name, row_id)
);
CREATE INDEX tombstones_project ON tombstones(project_id, deleted_at);

-- Bundles imported, by manifest hash: a bundle is imported once.
CREATE TABLE sync_state (
    manifest_hash TEXT PRIMARY KEY,
    imported_at   TEXT NOT NULL,
    rows_inserted INTEGER NOT NULL DEFAULT 0,
    source_path   TEXT
);

-- A row both sides changed to different content: local kept, incoming kept here until resolved.
CREATE TABLE sync_conflicts (
    id               TEXT PRIMARY KEY,
    observation_id   TEXT,
    local_content    TEXT NOT NULL,
    incoming_content TEXT NOT NULL,
    their_node       TEXT,
    manifest_hash    TEXT,
    project_id       TEXT REFERENCES projects(id) ON DELETE SET NULL,
    detected_at      TEXT NOT NULL,
    resolved_at      TEXT,
    resolution       TEXT CHECK (resolution IS NULL OR resolution IN ('ours','theirs','both'))
);
CREATE INDEX sync_conflicts_open ON sync_conflicts(resolved_at, detected_at);

-- What a peer announced (cuba_sync notify); closed when that bundle is imported. Capped at 200
-- per node by the service.
CREATE TABLE peer_notices (
    id            TEXT PRIMARY KEY,
    node_id       TEXT NOT NULL,
    node_name     TEXT,
    manifest_hash TEXT,
    summary       TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    closed_at     TEXT
);
CREATE INDEX peer_notices_open ON peer_notices(closed_at, created_at);

-- Read-only HTTP peers this store pulls from (cuba_sync fetch).
CREATE TABLE sync_peers (
    name               TEXT PRIMARY KEY,
    url                TEXT NOT NULL,
    last_manifest_hash TEXT,
    last_synced_at     TEXT,
    last_error         TEXT
);

-- Every delete of a synced row leaves a tombstone (cascades included: foreign-key actions fire
-- triggers); a row that comes back with the same id (an undo restoring it, an import) removes it.
-- deleted_at has the format of the rest of the store (ISO 8601 UTC, microseconds).
CREATE TRIGGER entities_tombstone AFTER DELETE ON entities BEGIN
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES ('entities', old.id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
            (SELECT value FROM meta WHERE key = 'node_id'), old.project_id)
    ON CONFLICT(table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
END;
CREATE TRIGGER entities_untombstone AFTER INSERT ON entities BEGIN
    DELETE FROM tombstones WHERE table_name = 'entities' AND row_id = new.id;
END;
CREATE TRIGGER observations_tombstone AFTER DELETE ON observations BEGIN
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES ('observations', old.id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
            (SELECT value FROM meta WHERE key = 'node_id'), old.project_id)
    ON CONFLICT(table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
END;
CREATE TRIGGER observations_untombstone AFTER INSERT ON observations BEGIN
    DELETE FROM tombstones WHERE table_name = 'observations' AND row_id = new.id;
END;
CREATE TRIGGER episodes_tombstone AFTER DELETE ON episodes BEGIN
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES ('episodes', old.id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
            (SELECT value FROM meta WHERE key = 'node_id'), old.project_id)
    ON CONFLICT(table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
END;
CREATE TRIGGER episodes_untombstone AFTER INSERT ON episodes BEGIN
    DELETE FROM tombstones WHERE table_name = 'episodes' AND row_id = new.id;
END;
CREATE TRIGGER errors_tombstone AFTER DELETE ON errors BEGIN
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES ('errors', old.id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
            (SELECT value FROM meta WHERE key = 'node_id'), old.project_id)
    ON CONFLICT(table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
END;
CREATE TRIGGER errors_untombstone AFTER INSERT ON errors BEGIN
    DELETE FROM tombstones WHERE table_name = 'errors' AND row_id = new.id;
END;
CREATE TRIGGER relations_tombstone AFTER DELETE ON relations BEGIN
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES ('relations', old.id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
            (SELECT value FROM meta WHERE key = 'node_id'), old.project_id)
    ON CONFLICT(table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
END;
CREATE TRIGGER relations_untombstone AFTER INSERT ON relations BEGIN
    DELETE FROM tombstones WHERE table_name = 'relations' AND row_id = new.id;
END;
CREATE TRIGGER projects_tombstone AFTER DELETE ON projects BEGIN
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES ('projects', old.id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
            (SELECT value FROM meta WHERE key = 'node_id'), old.id)
    ON CONFLICT(table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
END;
CREATE TRIGGER projects_untombstone AFTER INSERT ON projects BEGIN
    DELETE FROM tombstones WHERE table_name = 'projects' AND row_id = new.id;
END;
CREATE TRIGGER procedures_tombstone AFTER DELETE ON procedures BEGIN
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES ('procedures', old.id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
            (SELECT value FROM meta WHERE key = 'node_id'), old.project_id)
    ON CONFLICT(table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
END;
CREATE TRIGGER procedures_untombstone AFTER INSERT ON procedures BEGIN
    DELETE FROM tombstones WHERE table_name = 'procedures' AND row_id = new.id;
END;
CREATE TRIGGER facts_tombstone AFTER DELETE ON facts BEGIN
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES ('facts', old.fact_id, strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000+00:00',
            (SELECT value FROM meta WHERE key = 'node_id'), old.project_id)
    ON CONFLICT(table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
END;
CREATE TRIGGER facts_untombstone AFTER INSERT ON facts BEGIN
    DELETE FROM tombstones WHERE table_name = 'facts' AND row_id = new.fact_id;
END;
