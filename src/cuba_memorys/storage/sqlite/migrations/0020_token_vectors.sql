-- Late interaction paid at write time (issue 31): the reranker's token vectors of an observation
-- (all-MiniLM-L6-v2's content tokens of its first 128, int8 per token with a float16 scale;
-- judge/late_interaction.py encode_tokens), written by the background embedding queue beside the
-- passage vector, so a search reranks its top rows without running the model. NULL: not computed
-- yet (reranked from its text, as before). They live in the row itself, so a delete or a forget
-- takes them with it, and migrate copies them like any column.
ALTER TABLE observations ADD COLUMN token_vectors BLOB;
-- A row whose text changes (a correction, a merge, a sync import) loses its token vectors here,
-- whichever code path changed it: they were computed from the old text (the writer queues the
-- row again; until then the reranker reads its text).
CREATE TRIGGER observations_tokens_stale AFTER UPDATE OF content ON observations
FOR EACH ROW WHEN NEW.content IS NOT OLD.content AND NEW.token_vectors IS NOT NULL
BEGIN
    UPDATE observations SET token_vectors = NULL WHERE seq = NEW.seq;
END;
