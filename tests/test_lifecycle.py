"""The memory model (issue 13): decay, episode decay and feedback against hand-computed numbers;
cuba_zafra and cuba_eco through their services on both backends, then over stdio with the
official MCP client, bad values included."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from cuba_memorys.errors import InvalidInput, NotFound, SecretRefused
from cuba_memorys.models import NewObservation, iso, utc_now
from cuba_memorys.services.graph import entities
from cuba_memorys.services.lifecycle import decay as formulas
from cuba_memorys.services.lifecycle import facts, feedback, undo, zafra
from cuba_memorys.services.observations import ingest
from cuba_memorys.services.observations import write as observations
from mcp_helpers import run_stdio


# -- the formulas, against numbers computed by hand ----------------------------------------------
def test_stratified_decay_matches_hand_computed_values():
    # 0.5 · exp(−0.693 · 7 / 7) = 0.5 · 0.50007 = 0.250036
    assert formulas.decayed_importance(0.5, 7, 7, 0) == pytest.approx(0.250036, abs=1e-6)
    # three accesses lengthen H to 7 · (1 + ln 4) = 16.70406: 0.5 · exp(−0.290409) = 0.373979
    assert formulas.decayed_importance(0.5, 7, 7, 3) == pytest.approx(0.373979, abs=1e-6)
    # a fact (H = 30) after 30 days: 0.8 · exp(−0.693) = 0.400059
    assert formulas.decayed_importance(0.8, 30, 30, 0) == pytest.approx(0.400059, abs=1e-6)
    assert formulas.decayed_importance(0.02, 365, 7, 0) == 0.01  # the floor
    assert formulas.decayed_importance(0.5, 0, 7, 0) == 0.5


def test_episode_power_law_matches_hand_computed_values():
    assert formulas.episode_importance(0) == 0.5
    assert formulas.episode_importance(10) == pytest.approx(0.5 / math.sqrt(2), abs=1e-9)  # 0.353553
    assert formulas.episode_importance(30, c=0.1, beta=0.5) == pytest.approx(0.25, abs=1e-9)  # 0.5 / √4
    assert formulas.episode_importance(10_000_000) == 0.01


def test_feedback_rule_matches_hand_computed_values():
    assert formulas.positive_update(0.5, 0) == pytest.approx(0.525)  # 0.5 + 0.05 · 0.5
    assert formulas.positive_update(0.5, 300) == pytest.approx(0.5125)  # rate 0.05 / √4 = 0.025
    assert formulas.negative_update(0.5, 0) == pytest.approx(0.475)
    assert formulas.negative_update(0.8, 300) == pytest.approx(0.78)  # 0.8 − 0.025 · 0.8
    assert formulas.positive_update(1.0, 0) == 1.0 and formulas.negative_update(0.0, 0) == 0.0


# -- decay through the service -----------------------------------------------------------------
def _add(mem, entity, content, kind="fact", days_ago=0.0):
    created = iso(utc_now() - timedelta(days=days_ago)) if days_ago else None
    return observations.add(mem, None, entity_name=entity, content=content, observation_type=kind,
                            created_at=created)["id"]


def _importance(mem, obs_id):
    return mem.store.fetch_rows("observation", [obs_id])[obs_id]["importance"]


def test_decay_lowers_idle_rows_by_the_formula_and_spares_permanent_ones(memory):
    context = _add(memory, "deploy", "The staging cluster restarts every night at 02:00", "context", days_ago=14)
    decision = _add(memory, "deploy", "We deploy with blue-green releases only", "decision", days_ago=14)
    before = {i: memory.store.fetch_rows("observation", [i])[i] for i in (context, decision)}
    answer = zafra.decay(memory, None)
    assert answer["decayed"] == 1 and answer["stratification"]["halflife_days"]["decision"] == "never"
    expected = before[context]["importance"] * math.exp(-0.693 * 14 / 7)  # 14 days idle, H = 7
    assert _importance(memory, context) == pytest.approx(expected, rel=1e-3)
    assert _importance(memory, decision) == before[decision]["importance"]
    after = memory.store.fetch_rows("observation", [context])[context]
    # aging is not a change of meaning: neither version nor updated_at move
    assert (after["version"], after["updated_at"]) == (before[context]["version"], before[context]["updated_at"])
    assert after["last_decayed_at"] is not None
    assert zafra.decay(memory, None)["decayed"] in (0, 1)  # a second pass decays only the time since
    assert _importance(memory, context) == pytest.approx(expected, rel=1e-3)


def test_decay_with_one_halflife_and_bad_values(memory):
    fact = _add(memory, "cache", "Redis keeps sessions for thirty minutes", days_ago=10)
    start = _importance(memory, fact)
    zafra.decay(memory, None, halflife_days=10)
    assert _importance(memory, fact) == pytest.approx(start * math.exp(-0.693), rel=1e-3)
    for bad in (0, -1, "ten", True):
        with pytest.raises(InvalidInput, match="halflife_days"):
            zafra.decay(memory, None, halflife_days=bad)


def test_rows_accessed_in_the_last_day_are_not_decayed(memory):
    fact = _add(memory, "cache", "Redis keeps sessions for thirty minutes", "context", days_ago=10)
    memory.store.record_access("observation", [fact])
    start = _importance(memory, fact)
    assert zafra.decay(memory, None)["decayed"] == 0
    assert _importance(memory, fact) == start


def test_decay_protects_entities_written_recently_while_a_session_is_open(memory):
    from cuba_memorys.services.sessions import sessions

    old = _add(memory, "parser", "The parser drops unknown keys silently", "context", days_ago=10)
    sessions.start(memory, None, name="work")
    _add(memory, "parser", "The parser is being rewritten this week", "context")
    done = formulas.decay_observations(memory, None, protect=True)
    assert done["protected_entities"] == 1 and done["decayed"] == 0
    explicit = zafra.decay(memory, None)  # an explicit decay protects them too
    assert explicit["decayed"] == 0 and explicit["protected_entities"] == 1
    sessions.end(memory, None, outcome="success")
    assert zafra.decay(memory, None)["decayed"] == 1  # no open session: nothing is protected
    assert _importance(memory, old) < 0.5


def test_decay_episodes_uses_the_power_law(memory):
    episode = memory.store.add_episode(entities.ensure_entity(memory, None, "release").id, "Shipped 1.0", [], [],
                                       0.5, None, None, None, created_at=iso(utc_now() - timedelta(days=30)))
    answer = zafra.decay_episodes(memory, None)
    assert answer["decayed"] == 1 and (answer["c"], answer["beta"]) == (0.1, 0.5)
    row = memory.store.fetch_rows("episode", [episode])[episode]
    assert row["importance"] == pytest.approx(0.25, abs=1e-3)  # 0.5 / (1 + 3)^0.5
    with pytest.raises(InvalidInput, match="beta"):
        zafra.decay_episodes(memory, None, beta=0)


# -- feedback and corrections ----------------------------------------------------------------------
def test_positive_and_negative_feedback_follow_the_bounded_rule(memory):
    fact = _add(memory, "cache", "Redis keeps sessions for thirty minutes")
    start = _importance(memory, fact)
    assert feedback.positive(memory, None, observation_id=fact)["boosted_count"] == 1
    assert _importance(memory, fact) == pytest.approx(start + 0.05 * (1 - start))
    row = memory.store.fetch_rows("observation", [fact])[fact]
    assert row["access_count"] == 1 and row["last_accessed"]
    boosted = row["importance"]
    answer = feedback.negative(memory, None, observation_id=fact, entity_name="cache")
    assert answer == {"action": "negative", "decreased_count": 2, "rule": "oja_negative_robbins_monro"}
    rate = 0.05 / math.sqrt(1 + 1 / 100)  # one access counted by the positive feedback
    assert _importance(memory, fact) == pytest.approx(boosted - rate * boosted)
    with pytest.raises(InvalidInput, match="observation_id"):
        feedback.positive(memory, None)
    with pytest.raises(NotFound):
        feedback.positive(memory, None, observation_id="no-such-row")


def test_correct_keeps_the_old_text_and_the_fact_history(memory):
    fact = _add(memory, "db", "Postgres listens on port 5432")
    answer = feedback.correct(memory, None, observation_id=fact, correction="Postgres listens on port 6543")
    assert answer["versioned"] is True and answer["version"] == 2 and answer["audit_id"] >= 1
    row = memory.store.fetch_rows("observation", [fact])[fact]
    assert row["content"] == "Postgres listens on port 6543" and row["version"] == 2
    assert row["previous_versions"][-1]["content"] == "Postgres listens on port 5432"
    assert (row["embedding_model"] is not None) == (memory.embedder is not None)  # recomputed at once
    history = memory.store.facts_of(fact)
    assert [f["object"] for f in history] == ["Postgres listens on port 5432", "Postgres listens on port 6543"]
    assert [f["is_current"] for f in history] == [False, True] and history[0]["valid_to"]
    for _ in range(25):  # previous_versions keeps the newest 20
        feedback.correct(memory, None, observation_id=fact, correction=f"port {6000 + _}")
    assert len(memory.store.fetch_rows("observation", [fact])[fact]["previous_versions"]) == 20
    with pytest.raises(SecretRefused):
        feedback.correct(memory, None, observation_id=fact, correction="token ghp_abcdefghijklmnopqrstuvwxyz0123456789")
    with pytest.raises(InvalidInput, match="correction"):
        feedback.correct(memory, None, observation_id=fact, correction="")


def test_quarantine_promote_and_pending(memory):
    stored = ingest.ingest(memory, None, items=[{"entity_name": "vendor", "content": "The vendor API allows 100 rps"}],
                           untrusted=True)
    obs_id = stored["ids"][0]
    assert "cuba_eco" in stored["note"]
    waiting = feedback.pending(memory, None)
    assert waiting["count"] == 1 and waiting["quarantined"][0]["observation_id"] == obs_id
    promoted = feedback.promote(memory, None, observation_id=obs_id)
    assert promoted["trust"] == "trusted" and promoted["retrievable"] is True
    assert feedback.pending(memory, None)["count"] == 0
    back = feedback.quarantine(memory, None, kind="observation", id=obs_id)
    assert back["retrievable"] is False and back["observation_id"] == obs_id
    with pytest.raises(InvalidInput, match="kind"):
        feedback.promote(memory, None, kind="entity", id=obs_id)
    with pytest.raises(NotFound):
        feedback.promote(memory, None, kind="error", id=obs_id)
    assert feedback.pending(memory, None, limit=999)["clamped"] == {"limit": {"given": 999, "used": 200}}


# -- prune, merge, summarize, stats ------------------------------------------------------------------
def test_prune_is_a_dry_run_until_confirmed_and_never_touches_decisions(memory):
    low = _add(memory, "old", "A long forgotten context line", "context")
    kept = _add(memory, "old", "We chose SQLite as the default store", "decision")
    for obs_id in (low, kept):
        memory.store.set_importance("observation", obs_id, 0.05, None, _importance(memory, obs_id))
    dry = zafra.prune(memory, None)
    assert dry["dry_run"] is True and dry["would_prune"] == 1 and [r["id"] for r in dry["rows"]] == [low]
    assert dry["by_project"] == [{"project": "(global)", "observations": 1}]
    assert memory.store.fetch_rows("observation", [low])  # nothing deleted
    with pytest.raises(InvalidInput, match="threshold"):
        zafra.prune(memory, None, threshold=2)


def test_merge_supersedes_the_newer_of_near_identical_rows(memory):
    first = _add(memory, "ci", "The CI pipeline runs the unit tests on every push to main")
    _add(memory, "ci", "CI builds the docs nightly")
    # a near-duplicate the write-time dedup would have absorbed (rows an import or an older
    # version stored): written straight to the store
    entity = entities.find_entity(memory, None, "ci")
    second = memory.store.add_observation(NewObservation(
        entity_id=entity.id, content="The CI pipeline runs all the unit tests on each push to main"))
    facts.opened(memory, second, entity, "fact", "The CI pipeline runs all the unit tests on each push to main", 0.5,
                 None)
    found = zafra.find_duplicates(memory, None)
    assert any({d["id_a"], d["id_b"]} == {first, second} for d in found["duplicates"])
    answer = zafra.merge(memory, None, similarity_threshold=0.7)
    assert answer["merged"] == 1 and answer["pairs"] == [{"superseded": second, "kept": first}]
    row = memory.store.fetch_rows("observation", [second])[second]
    assert (row["observation_type"], row["superseded_from"], row["superseded_by"]) == ("superseded", "fact", first)
    assert not any(f["is_current"] for f in memory.store.facts_of(second))
    assert zafra.stats(memory, None)["superseded"] == 1
    superseded_at = row["updated_at"]
    undo.apply(memory, answer["undo_file"])  # the way back: the row is live again, its fact current
    again = memory.store.fetch_rows("observation", [second])[second]
    assert (again["observation_type"], again["superseded_by"]) == ("fact", None)
    assert any(f["is_current"] for f in memory.store.facts_of(second))
    # un-superseding changes its meaning again: its clock moves forward, never back
    assert again["version"] == row["version"] + 1 and again["updated_at"] > superseded_at


def test_merge_never_pairs_rows_of_another_trust_or_type(memory):
    entity = entities.ensure_entity(memory, None, "billing")
    text = "Billing retries failed card payments every night at two"
    memory.store.add_observation(NewObservation(entity_id=entity.id, content=text, trust="quarantined"))
    trusted = memory.store.add_observation(NewObservation(entity_id=entity.id, content=text + "."))
    memory.store.add_observation(NewObservation(entity_id=entity.id, content=text + "!", observation_type="decision"))
    assert zafra.merge(memory, None)["merged"] == 0
    assert memory.store.fetch_rows("observation", [trusted])[trusted]["observation_type"] == "fact"


def test_summarize_replaces_rows_but_keeps_decisions(memory):
    ids = [_add(memory, "auth", text) for text in ("Tokens expire after one hour", "Refresh tokens last 30 days")]
    decision = _add(memory, "auth", "We use OAuth2 with PKCE for every client", "decision")
    answer = zafra.summarize(memory, None, entity_name="auth",
                             compressed_summary="Access tokens last 1 h, refresh tokens 30 days")
    assert answer["superseded"] == 2 and sorted(answer["replaced"]) == sorted(ids) and answer["kept_permanent"] == 1
    live = [o.id for o in memory.store.observations_of(entities.find_entity(memory, None, "auth").id,
                                                        memory.scope(None))]
    assert sorted(live) == sorted([decision, answer["summary_id"]])
    summary = memory.store.fetch_rows("observation", [answer["summary_id"]])[answer["summary_id"]]
    assert summary["source"] == "consolidation"
    with pytest.raises(NotFound):
        zafra.summarize(memory, None, entity_name="nobody", compressed_summary="x")
    with pytest.raises(InvalidInput, match="compressed_summary"):
        zafra.summarize(memory, None, entity_name="auth", compressed_summary="")


def test_stats_and_export(memory):
    _add(memory, "api", "The API is versioned in the URL path")
    stats = zafra.stats(memory, None)
    assert (stats["entities"], stats["observations"], stats["active"], stats["superseded"]) == (1, 1, 1, 0)
    export = zafra.export(memory, None)
    assert export["count"] == 1 and export["entities"][0]["name"] == "api"


# -- facts over time: cuba_faro as_of -------------------------------------------------------------------
def test_as_of_answers_what_was_held_true_then(memory):
    from cuba_memorys.services.search import faro

    fact = _add(memory, "db", "The primary database runs Postgres 14")
    before_correction = iso(utc_now())
    feedback.correct(memory, None, observation_id=fact, correction="The primary database runs Postgres 17")
    now_rows = faro.faro(memory, None, query="primary database Postgres version", format="verbose")["results"]
    assert [r["content"] for r in now_rows if r["id"] == fact] == ["The primary database runs Postgres 17"]
    then = faro.faro(memory, None, query="primary database Postgres version", format="verbose",
                     as_of=before_correction)["results"]
    row = next(r for r in then if r["id"] == fact)
    assert row["content"] == "The primary database runs Postgres 14" and row["as_of"]["changed_since"] is True
    merged = _add(memory, "db", "Backups run at midnight")
    zafra.summarize(memory, None, entity_name="db", compressed_summary="Postgres 17, nightly backups")
    assert all(r["id"] not in (fact, merged) for r in faro.faro(memory, None, query="backups midnight")["results"])
    earlier = faro.faro(memory, None, query="backups midnight", as_of=iso(utc_now() - timedelta(seconds=0)))
    assert earlier["results"] is not None
    long_ago = faro.faro(memory, None, query="backups midnight", as_of="2001-01-01T00:00:00Z")
    assert long_ago["results"] == []
    with pytest.raises(InvalidInput, match="as_of"):
        faro.faro(memory, None, query="backups", as_of="last tuesday")


# -- the tools over MCP ---------------------------------------------------------------------------------
def test_zafra_and_eco_over_mcp_with_bad_values(location):
    async def body(agent):
        added = await agent.call("cuba_cronica", action="add", entity_name="svc", content="The service uses gRPC",
                                 created_at=iso(utc_now() - timedelta(days=20)), observation_type="context")
        decayed = await agent.call("cuba_zafra", action="decay")
        assert decayed["decayed"] == 1 and "formula" in decayed
        dry = await agent.call("cuba_zafra", action="prune", threshold=0.9)
        assert dry["dry_run"] is True and dry["would_prune"] == 1
        assert "threshold" in await agent.error("cuba_zafra", action="prune", threshold="high")
        assert (await agent.call("cuba_zafra", action="stats", confirm=True))["ignored"] == ["confirm"]  # prune's
        boosted = await agent.call("cuba_eco", action="positive", observation_id=added["id"])
        assert boosted["boosted_count"] == 1
        assert "correction" in await agent.error("cuba_eco", action="correct", observation_id=added["id"])
        fixed = await agent.call("cuba_eco", action="correct", observation_id=added["id"],
                                 correction="The service uses gRPC over TLS")
        assert fixed["new_content"] == "The service uses gRPC over TLS"
        assert (await agent.call("cuba_eco", action="pending"))["count"] == 0
        assert "kind" in await agent.error("cuba_eco", action="promote", kind="relation", id=added["id"])
        listed = await agent.call("cuba_cronica", action="list", entity_name="svc")
        assert listed["observations"][0]["content"] == "The service uses gRPC over TLS"
        assert (await agent.call("cuba_zafra", action="stats"))["observations"] == 1

    run_stdio(location, body)


# -- access: Hebbian reinforcement ----------------------------------------------------------------------
def test_get_reinforces_the_entity_and_gives_its_neighbours_a_share(memory):
    from cuba_memorys.services.graph import relations

    _add(memory, "api", "The API is versioned in the URL path")
    _add(memory, "gateway", "The gateway terminates TLS")
    relations.create(memory, None, from_entity="api", to_entity="gateway", relation_type="uses")
    api, gateway = (entities.find_entity(memory, None, n) for n in ("api", "gateway"))
    strength = memory.store.relations_of([api.id])[0]["strength"]
    entities.get(memory, None, name="api")
    api_after, gateway_after = (entities.find_entity(memory, None, n) for n in ("api", "gateway"))
    assert api_after.importance == pytest.approx(api.importance + 0.05 * (1 - api.importance))
    share = 0.1 * 0.05 * strength * (1 - gateway.importance)
    assert gateway_after.importance == pytest.approx(gateway.importance + share)
    assert api_after.access_count == api.access_count + 1 and gateway_after.access_count == gateway.access_count


def test_a_search_hit_counts_an_access_without_changing_the_row(memory):
    from cuba_memorys.services.search import faro

    fact = _add(memory, "queue", "The job queue retries failed jobs three times")
    before = memory.store.fetch_rows("observation", [fact])[fact]
    assert any(r["id"] == fact for r in faro.faro(memory, None, query="job queue retries")["results"])
    memory.settle()  # access counts are written after the answer
    after = memory.store.fetch_rows("observation", [fact])[fact]
    assert after["access_count"] == before["access_count"] + 1 and after["last_accessed"]
    assert (after["importance"], after["version"], after["updated_at"]) == (
        before["importance"], before["version"], before["updated_at"])


def test_reembed_reports_progress_when_the_client_asks(location):
    """Rows written without a model are embedded by cuba_zafra reembed, which sends MCP progress
    notifications to a client that passed a progress token (and none to one that did not)."""
    async def write(agent):
        await agent.call("cuba_cronica", action="batch_add", observations=[
            {"entity_name": "svc", "content": f"Service {i} listens on port {8000 + i}"} for i in range(5)])

    async def reembed(agent):
        seen: list[tuple[float, float | None]] = []

        async def progress(done, total, message):
            seen.append((done, total))

        result = await agent.session.call_tool("cuba_zafra", {"action": "reembed", "batch_size": 3},
                                               progress_callback=progress)
        first = result.structured_content
        quiet = await agent.call("cuba_zafra", action="reembed")
        return first, seen, quiet

    run_stdio(location, write, CUBA_EMBED_MODEL="none")
    # a server's start would embed them itself (the embedding queue's catch-up): the test hook holds it
    first, seen, quiet = run_stdio(location, reembed, CUBA_TEST_EMBED_QUEUE_DELAY_SECS="600")
    assert (first["total_fetched"], first["updated"]) == (3, 3) and "2 rows still lack" in first["note"]
    assert seen and seen[-1] == (3, 3)
    assert quiet["updated"] == 2 and quiet["note"] == "Every row has an embedding."


def test_merging_a_project_leaves_its_audit_events_as_they_were(memory):
    from cuba_memorys.services import audit
    from cuba_memorys.services.graph import projects

    projects.switch(memory, None, name="beta")
    fact = _add(memory, "svc", "The service uses gRPC")
    feedback.quarantine(memory, None, observation_id=fact)  # an audit event of project beta
    projects.switch(memory, None, name="alpha")
    assert projects.merge(memory, None, name="beta", to="alpha")["action"] == "merge"
    assert audit.verify(memory, None)["ok"] is True  # the chain was not rewritten


def test_a_backfill_never_pins_an_old_texts_vector_on_a_corrected_row(memory):
    import numpy as np

    entity = entities.ensure_entity(memory, None, "db")
    obs = memory.store.add_observation(NewObservation(entity_id=entity.id, content="Postgres listens on 5432"))
    (seq, old_text, _), = memory.store.rows_missing_embedding("observation", 10)
    assert memory.store.correct_observation(obs, "Postgres listens on 6543", [], iso(utc_now()), 1)  # meanwhile
    model = memory.loaded_embedder()
    vector = np.ones(model.dim, dtype=np.float32) / np.sqrt(model.dim)
    memory.store.set_embeddings("observation", [(seq, vector)], model.name, [old_text])
    assert memory.store.fetch_rows("observation", [obs])[obs]["embedding_model"] is None  # not written
    memory.store.set_embeddings("observation", [(seq, vector)], model.name, ["Postgres listens on 6543"])
    assert memory.store.fetch_rows("observation", [obs])[obs]["embedding_model"] == model.name


def test_concurrent_writes_are_not_lost(memory):
    """The store's conditional writes: a correction at a version another already replaced, a
    feedback or decay over an importance that changed since it was read, write nothing."""
    fact = _add(memory, "db", "Postgres listens on port 5432")
    assert memory.store.correct_observation(fact, "port 6543", [], iso(utc_now()), 1) is True
    assert memory.store.correct_observation(fact, "port 7000", [], iso(utc_now()), 1) is False  # stale version
    assert _row(memory, fact)["content"] == "port 6543" and _row(memory, fact)["version"] == 2
    now = _importance(memory, fact)
    assert memory.store.set_importance("observation", fact, 0.9, None, now + 0.1) is False  # read a stale value
    assert memory.store.set_decayed("observation", [(fact, now + 0.1, 0.01)], iso(utc_now())) == 0
    assert _importance(memory, fact) == now
    assert memory.store.set_decayed("observation", [(fact, now, 0.3)], iso(utc_now())) == 1


def _row(mem, obs_id):
    return mem.store.fetch_rows("observation", [obs_id])[obs_id]


def test_a_projects_maintenance_leaves_shared_rows_alone(memory):
    """Rows of no project are every project's: a client with a project active neither prunes,
    merges, decays nor quarantines them (with no project active, it reaches every row)."""
    from cuba_memorys.services.graph import projects

    shared = _add(memory, "style", "Tabs are never used for indentation in this codebase", "context", days_ago=20)
    memory.store.set_importance("observation", shared, 0.05, None, _importance(memory, shared))
    projects.switch(memory, None, name="alpha")
    assert zafra.prune(memory, None)["would_prune"] == 0
    assert zafra.decay(memory, None)["decayed"] == 0
    with pytest.raises(NotFound):
        feedback.quarantine(memory, None, observation_id=shared)
    projects.switch(memory, None, name="*")
    assert zafra.prune(memory, None)["would_prune"] == 1
