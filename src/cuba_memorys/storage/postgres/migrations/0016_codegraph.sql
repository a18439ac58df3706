-- As the SQLite migration 0016. The codegraph (issue 19; spec §4d): `cuba-memorys codegraph
-- build` writes one entity per symbol (entity_type code_symbol), a placeholder per importing
-- file and module (module) and one per imported path (external_dependency).
ALTER TABLE entities DROP CONSTRAINT IF EXISTS entities_entity_type_check;
ALTER TABLE entities ADD CONSTRAINT entities_entity_type_check
    CHECK (entity_type IN ('concept','project','technology','person','pattern','config',
                           'code_symbol','module','external_dependency'));

-- Which files a build parsed, with what content, so the next build skips the unchanged ones
-- and knows which symbols each file had. No unique key, so a project merge that brings two
-- rows for one file together cannot fail (the newest parsed_at is used).
CREATE TABLE codegraph_files (
    id           TEXT PRIMARY KEY,
    project_id   TEXT REFERENCES projects(id) ON DELETE SET NULL,
    repo_root    TEXT NOT NULL,
    path         TEXT NOT NULL,
    language     TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    symbol_count INTEGER NOT NULL DEFAULT 0,
    symbols      TEXT NOT NULL DEFAULT '[]',
    parsed_at    TEXT NOT NULL
);
CREATE INDEX codegraph_files_place ON codegraph_files(repo_root, path);
CREATE INDEX codegraph_files_project ON codegraph_files(project_id);

-- Row-level security as every table with a project: the tenant rule, then the grants' rules.
DO $$
BEGIN
    ALTER TABLE codegraph_files ENABLE ROW LEVEL SECURITY;
    ALTER TABLE codegraph_files FORCE ROW LEVEL SECURITY;
    CREATE POLICY tenant_isolation ON codegraph_files USING (cuba_visible(project_id));
    CREATE POLICY grant_read ON codegraph_files AS RESTRICTIVE FOR SELECT
        USING (cuba_granted(project_id, 'cuba.readable'));
    CREATE POLICY grant_insert ON codegraph_files AS RESTRICTIVE FOR INSERT
        WITH CHECK (cuba_granted(project_id, 'cuba.writable'));
    CREATE POLICY grant_update ON codegraph_files AS RESTRICTIVE FOR UPDATE
        USING (cuba_granted(project_id, 'cuba.writable'));
    CREATE POLICY grant_delete ON codegraph_files AS RESTRICTIVE FOR DELETE
        USING (cuba_granted(project_id, 'cuba.writable'));
END $$;
