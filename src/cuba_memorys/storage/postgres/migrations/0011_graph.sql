-- Graph analysis (issue 14): each entity's last PageRank and Leiden community. One row per
-- entity that took part in a computation; it goes with its entity.
CREATE TABLE node_metrics (
    entity_id           TEXT PRIMARY KEY REFERENCES entities(id) ON DELETE CASCADE,
    project_id          TEXT REFERENCES projects(id) ON DELETE SET NULL,
    pagerank            DOUBLE PRECISION,
    pagerank_at         TEXT,
    community_id        INTEGER,
    community_algorithm TEXT,
    modularity          DOUBLE PRECISION,
    communities_at      TEXT,
    computed_at         TEXT NOT NULL
);
CREATE INDEX node_metrics_project ON node_metrics(project_id);
CREATE INDEX node_metrics_community ON node_metrics(community_id);

-- Row-level security as every table with a project: the tenant rule, then the grants' rules.
ALTER TABLE node_metrics ENABLE ROW LEVEL SECURITY;
ALTER TABLE node_metrics FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON node_metrics USING (cuba_visible(project_id));
CREATE POLICY grant_read ON node_metrics AS RESTRICTIVE FOR SELECT
    USING (cuba_granted(project_id, 'cuba.readable'));
CREATE POLICY grant_insert ON node_metrics AS RESTRICTIVE FOR INSERT
    WITH CHECK (cuba_granted(project_id, 'cuba.writable'));
CREATE POLICY grant_update ON node_metrics AS RESTRICTIVE FOR UPDATE
    USING (cuba_granted(project_id, 'cuba.writable'));
CREATE POLICY grant_delete ON node_metrics AS RESTRICTIVE FOR DELETE
    USING (cuba_granted(project_id, 'cuba.writable'));
