-- Graph analysis (issue 14): each entity's last PageRank and Leiden community. One row per
-- entity that took part in a computation; it goes with its entity.
CREATE TABLE node_metrics (
    entity_id           TEXT PRIMARY KEY REFERENCES entities(id) ON DELETE CASCADE,
    project_id          TEXT REFERENCES projects(id) ON DELETE SET NULL,
    pagerank            REAL,
    pagerank_at         TEXT,
    community_id        INTEGER,
    community_algorithm TEXT,
    modularity          REAL,
    communities_at      TEXT,
    computed_at         TEXT NOT NULL
);
CREATE INDEX node_metrics_project ON node_metrics(project_id);
CREATE INDEX node_metrics_community ON node_metrics(community_id);
