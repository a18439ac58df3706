-- Late interaction paid at write time (issue 31): the reranker's token vectors of an observation
-- (all-MiniLM-L6-v2's content tokens of its first 128, int8 per token with a float16 scale;
-- judge/late_interaction.py encode_tokens), written by the background embedding queue beside the
-- passage vector, so a search reranks its top rows without running the model. NULL: not computed
-- yet (reranked from its text, as before). They live in the row itself, so a delete or a forget
-- takes them with it, and migrate copies them like any column.
ALTER TABLE observations ADD COLUMN token_vectors BYTEA;
-- A row whose text changes (a correction, a merge, a sync import) loses its token vectors here,
-- whichever code path changed it: they were computed from the old text (the writer queues the
-- row again; until then the reranker reads its text).
CREATE FUNCTION observations_tokens_stale() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.content IS DISTINCT FROM OLD.content THEN
        NEW.token_vectors := NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER observations_tokens_stale BEFORE UPDATE OF content ON observations
FOR EACH ROW EXECUTE FUNCTION observations_tokens_stale();
