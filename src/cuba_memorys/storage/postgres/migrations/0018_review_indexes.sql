-- The quarantined rows (cuba_eco pending, the panel's Overview and Review) and the observations of
-- one type (cuba_decreto list, the panel's Timeline) were full scans: ~250 ms each at 100k rows
-- (docs/benchmarks.md, "Web panel"). Quarantined rows are few, so a partial index stays small.
CREATE INDEX observations_quarantined ON observations(created_at) WHERE trust = 'quarantined';
CREATE INDEX observations_type_created ON observations(observation_type, created_at);
