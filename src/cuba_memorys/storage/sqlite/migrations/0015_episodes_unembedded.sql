-- The background embedding queue's catch-up at start reads the episodes without a vector
-- (services/embedding_queue.py), as observations_unembedded serves the observations'.
CREATE INDEX episodes_unembedded ON episodes(seq) WHERE embedding IS NULL;
