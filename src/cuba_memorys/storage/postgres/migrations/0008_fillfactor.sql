-- Room on each page for the access-count updates every search makes (the testing effect), so
-- PostgreSQL can update those rows in place (HOT: no new entry in the HNSW, GIN and B-tree
-- indexes). Measured at 100k rows (docs/benchmarks.md): 44% → 88% of the updates HOT, search p50
-- 54 → 48 ms. It applies to pages written from now on; `VACUUM FULL observations` (or pg_repack)
-- rewrites an existing table with it.
ALTER TABLE observations SET (fillfactor = 80);
ALTER TABLE entities SET (fillfactor = 90);
