-- As the SQLite migration 0014. Sync between machines (cuba_sync, issue 17): the store's node id,
-- the tombstones that let a delete travel in a bundle, the bundles imported, the conflicts an
-- import opens, peers and their notices. Columns follow the original's schema (original-system.md
-- §3, 0.27 §4e).

-- The node id is made once, here, when the migration runs (so every store has one from its
-- first open, and `cuba-memorys migrate` carries it over with the rest of meta): a random
-- UUID (version 4 layout).
INSERT INTO meta(key, value) VALUES ('node_id', gen_random_uuid()::text) ON CONFLICT (key) DO NOTHING;

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
    rows_inserted BIGINT NOT NULL DEFAULT 0,
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

-- Every delete of a synced row leaves a tombstone (cascades included), and a row that comes back
-- with the same id (an undo restoring it, an import) removes it. The row's id is fact_id for
-- facts and id elsewhere, its project is id for projects and project_id elsewhere; PL/pgSQL
-- evaluates only the branch taken, so each table reads only columns it has (and no row is
-- converted as a whole, which would cost an embedding's worth of text on every write).
CREATE FUNCTION cuba_tombstone_record() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    row_key TEXT;
    row_project TEXT;
BEGIN
    IF TG_TABLE_NAME = 'facts' THEN
        row_key := OLD.fact_id;
    ELSE
        row_key := OLD.id;
    END IF;
    IF TG_TABLE_NAME = 'projects' THEN
        row_project := OLD.id;
    ELSE
        row_project := OLD.project_id;
    END IF;
    INSERT INTO tombstones(table_name, row_id, deleted_at, origin_node, project_id)
    VALUES (TG_TABLE_NAME, row_key,
            to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
            (SELECT value FROM meta WHERE key = 'node_id'), row_project)
    ON CONFLICT (table_name, row_id) DO UPDATE SET deleted_at = excluded.deleted_at,
        origin_node = excluded.origin_node, project_id = excluded.project_id;
    RETURN NULL;
END $$;

CREATE FUNCTION cuba_tombstone_clear() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'facts' THEN
        DELETE FROM tombstones WHERE table_name = 'facts' AND row_id = NEW.fact_id;
    ELSE
        DELETE FROM tombstones WHERE table_name = TG_TABLE_NAME AND row_id = NEW.id;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER entities_tombstone AFTER DELETE ON entities FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_record();
CREATE TRIGGER entities_untombstone AFTER INSERT ON entities FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_clear();
CREATE TRIGGER observations_tombstone AFTER DELETE ON observations FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_record();
CREATE TRIGGER observations_untombstone AFTER INSERT ON observations FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_clear();
CREATE TRIGGER episodes_tombstone AFTER DELETE ON episodes FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_record();
CREATE TRIGGER episodes_untombstone AFTER INSERT ON episodes FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_clear();
CREATE TRIGGER errors_tombstone AFTER DELETE ON errors FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_record();
CREATE TRIGGER errors_untombstone AFTER INSERT ON errors FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_clear();
CREATE TRIGGER relations_tombstone AFTER DELETE ON relations FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_record();
CREATE TRIGGER relations_untombstone AFTER INSERT ON relations FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_clear();
CREATE TRIGGER projects_tombstone AFTER DELETE ON projects FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_record();
CREATE TRIGGER projects_untombstone AFTER INSERT ON projects FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_clear();
CREATE TRIGGER procedures_tombstone AFTER DELETE ON procedures FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_record();
CREATE TRIGGER procedures_untombstone AFTER INSERT ON procedures FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_clear();
CREATE TRIGGER facts_tombstone AFTER DELETE ON facts FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_record();
CREATE TRIGGER facts_untombstone AFTER INSERT ON facts FOR EACH ROW EXECUTE FUNCTION cuba_tombstone_clear();

-- Row-level security as every table with a project: the tenant rule, then the grants' rules.
DO $$
DECLARE
    t TEXT;
BEGIN
    FOREACH t IN ARRAY ARRAY['tombstones', 'sync_conflicts'] LOOP
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
