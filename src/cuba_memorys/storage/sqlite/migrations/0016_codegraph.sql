-- The codegraph (issue 19; spec §4d): `cuba-memorys codegraph build` writes one entity per
-- symbol (entity_type code_symbol), a placeholder per importing file and module (module) and
-- one per imported path (external_dependency). The entity types' CHECK gains those three.
-- SQLite cannot ALTER a CHECK; widening one changes no stored row, so the table's recorded
-- definition is edited in place (the procedure https://sqlite.org/lang_altertable.html gives
-- for schema changes that leave the file's content valid), and the schema is reloaded.
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, '''pattern'',''config'')', '''pattern'',''config'',''code_symbol'',''module'',''external_dependency'')') WHERE type = 'table' AND name = 'entities';
PRAGMA writable_schema = RESET;

-- Which files a build parsed, with what content, so the next build skips the unchanged ones
-- and knows which symbols each file had (for the call edges of files it does not re-read,
-- and to retire the observations of symbols that left a file or of a file that is gone).
-- Rows are found by (project_id, repo_root, path); no unique key, so a project merge that
-- brings two rows for one file together cannot fail (the newest parsed_at is used, the
-- other replaced on the next parse).
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
