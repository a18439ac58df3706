-- Principals and their grants (serve with CUBA_TOKENS_FILE): a principal is who a bearer
-- token belongs to; a grant gives it reader, writer or admin on one project (project_id), or
-- on every project and on rows of no project (project_id NULL, shown as '*'). Tokens are not
-- here: their hashes live in the token file.
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
CREATE UNIQUE INDEX grants_principal_project ON grants(principal, ifnull(project_id, ''));
