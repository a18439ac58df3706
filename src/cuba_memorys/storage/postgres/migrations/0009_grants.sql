-- Principals and their grants, as the SQLite migration 0009: who a bearer token belongs to, and
-- reader / writer / admin per project (project_id NULL: every project, and rows of no project).
CREATE TABLE principals (
    name       TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
CREATE TABLE grants (
    principal  TEXT NOT NULL REFERENCES principals(name) ON DELETE CASCADE,
    project_id TEXT REFERENCES projects(id) ON DELETE CASCADE,
    role       TEXT NOT NULL CHECK (role IN ('reader', 'writer', 'admin')),
    created_at TEXT NOT NULL
);
CREATE UNIQUE INDEX grants_principal_project ON grants(principal, coalesce(project_id, ''));

-- The grants, enforced below the server's own checks: a restrictive policy on every table that
-- has a project. The server binds, per call, the projects its principal may read
-- (`cuba.readable`) and write (`cuba.writable`): unset or '' (no principal: the local user, or
-- the operator's CUBA_HTTP_TOKEN) restricts nothing, '*' is every project, else a comma list of
-- project ids ('-' alone: none). Rows of no project are readable by every principal and
-- writable only with a '*' grant. Restrictive policies AND with tenant_isolation, so a grant
-- never widens what the bound project shows.
CREATE FUNCTION cuba_granted(row_project TEXT, setting TEXT) RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting(setting, true), '') IN ('', '*')
        OR (row_project IS NULL AND setting = 'cuba.readable')
        OR row_project = ANY (string_to_array(current_setting(setting, true), ','))
$$;

DO $$
DECLARE
    t TEXT;
BEGIN
    -- every table tenant_isolation guards (the tables with a project), each already under RLS
    FOR t IN SELECT p.tablename FROM pg_policies p
             WHERE p.schemaname = current_schema() AND p.policyname = 'tenant_isolation'
               AND EXISTS (SELECT 1 FROM information_schema.columns c WHERE c.table_schema = p.schemaname
                           AND c.table_name = p.tablename AND c.column_name = 'project_id')
    LOOP
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
