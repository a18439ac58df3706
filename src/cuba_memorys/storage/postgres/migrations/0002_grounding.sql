-- Grounding: one row per verify call (for calibration), and cached pair judgments.
CREATE TABLE verify_log (
    id              TEXT PRIMARY KEY,
    claim           TEXT NOT NULL,
    entity_name     TEXT,
    confidence      DOUBLE PRECISION NOT NULL,
    grounding_level TEXT NOT NULL
                    CHECK (grounding_level IN ('verified','partial','weak','unknown','contradicted')),
    outcome         TEXT NOT NULL DEFAULT 'pending' CHECK (outcome IN ('pending','correct','incorrect','unknown')),
    judged_by       TEXT NOT NULL,
    project_id      TEXT REFERENCES projects(id) ON DELETE SET NULL,
    created_at      TEXT NOT NULL,
    resolved_at     TEXT
);
CREATE INDEX verify_log_level ON verify_log(grounding_level, outcome);

-- observation_a < observation_b: one row per unordered pair.
CREATE TABLE judgments (
    id            TEXT PRIMARY KEY,
    observation_a TEXT NOT NULL REFERENCES observations(id) ON DELETE CASCADE,
    observation_b TEXT NOT NULL REFERENCES observations(id) ON DELETE CASCADE,
    verdict       TEXT NOT NULL CHECK (verdict IN ('contradicts','supersedes','complementary','unrelated','unknown')),
    confidence    DOUBLE PRECISION NOT NULL,
    reason        TEXT,
    backend       TEXT NOT NULL,
    model         TEXT,
    created_at    TEXT NOT NULL,
    UNIQUE (observation_a, observation_b)
);
CREATE INDEX judgments_b ON judgments(observation_b);

ALTER TABLE verify_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE verify_log FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON verify_log USING (cuba_visible(project_id));
-- judgments follow their observations: readable when both observations are.
ALTER TABLE judgments ENABLE ROW LEVEL SECURITY;
ALTER TABLE judgments FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON judgments USING (
    EXISTS (SELECT 1 FROM observations o WHERE o.id = observation_a)
    AND EXISTS (SELECT 1 FROM observations o WHERE o.id = observation_b));
