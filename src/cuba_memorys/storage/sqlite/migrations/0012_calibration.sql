-- Calibration (cuba_calibrar): the Beta trust of each observation source, and the verify log
-- read by project and time.
--
-- source_trust is global, as the original's: a source is a kind of writer (agent, user, ...),
-- not a project's row. No row is seeded here: the five known sources start at Beta(1, 1) in the
-- service (services/calibration.py), and a row is written on a source's first outcome, so a
-- fresh database stays empty (`cuba-memorys migrate` copies into an empty target only).
CREATE TABLE source_trust (
    source     TEXT PRIMARY KEY,
    alpha      REAL NOT NULL DEFAULT 1 CHECK (alpha >= 1),
    beta       REAL NOT NULL DEFAULT 1 CHECK (beta >= 1),
    updated_at TEXT NOT NULL
);
CREATE INDEX verify_log_project ON verify_log(project_id, created_at);
