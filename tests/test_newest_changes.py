"""The 0.25-0.27 changes to tools we already had (issue 16, item 5; spec original-0.27.md §5).

cuba_cronica's embedding / write_to_searchable_ms, cuba_jornada start abandoning the open
session in one transaction, cuba_proyecto backfill (and `cuba-memorys project backfill`, and
its undo), scope=errors searching only errors, the session boost when a goal names the
entity, cuba_faro's query_class, and the entity-factoid leg behind CUBA_ENTITY_FACTOID.
Each through the official MCP client (stdio; cronica once over HTTP too), on both backends.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import SERVER_BIN, StoreLocation, settings_for
from cuba_memorys.errors import AccessDenied, Conflict, InvalidInput, NotFound
from cuba_memorys.models import NewObservation
from cuba_memorys.search.query_class import classify
from cuba_memorys.server import catalog
from cuba_memorys.services import access, audit, incidents
from cuba_memorys.services.graph import projects, relations
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.search import faro
from cuba_memorys.services.sessions import sessions
from cuba_memorys.services.workflow import procedures
from mcp_helpers import run_stdio
from test_http import Server, call, mcp_session, run

NO_MODEL = {"CUBA_EMBED_MODEL": "none"}
HELD_QUEUE = {"CUBA_TEST_EMBED_QUEUE_DELAY_SECS": "600"}  # a test hook: the embedding queue waits (config.py)


def null_rows(mem: Memory, table: str) -> int:
    return mem.store._one(f"SELECT count(*) FROM {table} WHERE project_id IS NULL")[0]


# -- cuba_cronica: embedding and write_to_searchable_ms -----------------------------------------
def test_cronica_reports_when_a_write_is_searchable(location: StoreLocation):
    async def body(agent):
        added = await agent.call("cuba_cronica", action="add", entity_name="deploy",
                                 content="Deploys go out from the release branch every Tuesday")
        found = await agent.call("cuba_faro", query="release branch Tuesday", track_access=False)
        batch = await agent.call("cuba_cronica", action="batch_add", observations=[
            {"entity_name": "deploy", "content": "Rollbacks use the previous container image tag"},
            {"entity_name": "deploy", "content": "Deploys go out from the release branch every Tuesday"},
            {"entity_name": "alerts", "content": "Pager alerts route to the platform rotation"}])
        refused = await agent.error("cuba_cronica", action="batch_add", observations=[
            {"entity_name": "x", "content": "kept?"}, {"entity_name": "x"}])
        nothing = await agent.error("cuba_cronica", action="list", entity_name="x")
        return added, found, batch, refused, nothing

    # the test hook holds the background embedding queue, so batch_add's rows are surely pending
    added, found, batch, refused, nothing = run_stdio(location, body, **HELD_QUEUE)
    assert added["embedding"] == "ready" and added["embedded"] is True
    assert 0 < added["write_to_searchable_ms"] < 30_000
    assert found["results"][0]["id"] == added["id"]  # searchable as soon as the answer came
    # a batch's vectors come from the background queue (a single add's do not)
    assert batch["embedding"] == "pending" and batch["write_to_searchable_ms"] > 0
    assert batch["ids"][1] == added["id"] and batch["deduplicated"] == 1 and len(batch["ids"]) == 3
    assert "observations[1].content" in refused and "'x' not found" in nothing  # the batch wrote nothing


def test_cronica_without_a_model_says_pending_and_bad_input_writes_nothing(location: StoreLocation):
    async def body(agent):
        added = await agent.call("cuba_cronica", action="add", entity_name="db", content="Backups run at 02:00 UTC")
        batch = await agent.call("cuba_cronica", action="batch_add", observations=[
            {"entity_name": "db", "content": "Replicas lag under a second"}])
        bad = await agent.error("cuba_cronica", action="add", entity_name="db", content="")
        listed = await agent.call("cuba_cronica", action="list", entity_name="db")
        return added, batch, bad, listed

    added, batch, bad, listed = run_stdio(location, body, **NO_MODEL)
    assert added["embedding"] == "pending" and added["embedded"] is False and added["write_to_searchable_ms"] > 0
    assert batch["embedding"] == "pending"
    assert "content" in bad and listed["count"] == 2


def test_a_duplicate_of_a_row_without_a_vector_is_pending(open_memory):
    bare = open_memory(embed_model="none")
    first = write.add(bare, None, entity_name="queue", content="The queue drains in order of arrival")
    bare.close()
    mem = open_memory()
    again = write.add(mem, None, entity_name="queue", content="The queue drains in order of arrival")
    assert again["deduplicated"] is True and again["id"] == first["id"]
    assert again["embedding"] == "pending"  # the row it matched has no vector yet
    fresh = write.add(mem, None, entity_name="queue", content="Poison messages go to a dead letter queue")
    assert fresh["embedding"] == "ready"


def test_cronica_keys_over_http(tmp_path: Path, location: StoreLocation):
    server = Server(location, tmp_path / "server.log", **HELD_QUEUE).start()
    try:
        async def body():
            async with mcp_session(server.url) as session:
                added = await call(session, "cuba_cronica", {"action": "add", "entity_name": "cdn",
                                                             "content": "The CDN caches images for a day"})
                batch = await call(session, "cuba_cronica", {"action": "batch_add", "observations": [
                    {"entity_name": "cdn", "content": "Purges take about a minute to propagate"}]})
                return added, batch

        added, batch = run(body)
    finally:
        server.stop()
    assert added["embedding"] == "ready" and added["write_to_searchable_ms"] > 0
    assert batch["embedding"] == "pending" and len(batch["ids"]) == 1  # the queue's, held by the hook


# -- cuba_jornada start abandons the open session ---------------------------------------------
def test_starting_twice_abandons_the_first_session_over_mcp(location: StoreLocation):
    async def body(agent):
        first = await agent.call("cuba_jornada", action="start", name="first", goals=["one"])
        second = await agent.call("cuba_jornada", action="start", name="second")
        listed = await agent.call("cuba_jornada", action="list")
        current = await agent.call("cuba_jornada", action="current")
        return first, second, listed, current

    first, second, listed, current = run_stdio(location, body, **NO_MODEL)
    rows = {s["id"]: s for s in listed["sessions"]}
    old = rows[first["session"]["id"]]
    assert old["outcome"] == "abandoned" and old["ended_at"] is not None
    assert second["previous_session"]["outcome"] == "abandoned"
    assert current["session"]["id"] == second["session"]["id"] and rows[current["session"]["id"]]["ended_at"] is None


def test_abandoning_and_starting_are_one_transaction(memory, monkeypatch):
    first = sessions.start(memory, "agent", name="first")["session"]["id"]

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(memory.store, "start_session", broken)
    with pytest.raises(RuntimeError):
        sessions.start(memory, "agent", name="second")
    monkeypatch.undo()
    still = sessions.current(memory, "agent")["session"]
    assert still is not None and still["id"] == first  # the abandon rolled back with the start
    assert [s["outcome"] for s in sessions.list_all(memory, "agent")["sessions"]] == [None]


# -- cuba_proyecto backfill ---------------------------------------------------------------------
def seed_unscoped(mem: Memory) -> dict:
    """Rows of no project in several tables, a project 'shop' with its own 'auth', a global grant."""
    first = write.add(mem, None, entity_name="auth", content="Tokens are signed with RS256")
    write.add(mem, None, entity_name="billing", content="Invoices are issued on the first of the month")
    relations.create(mem, None, from_entity="billing", to_entity="auth", relation_type="depends_on")
    incidents.report(mem, None, error_type="TimeoutError", error_message="the billing job timed out")
    sessions.start(mem, None, name="legacy work")
    sessions.end(mem, None)
    mem.store.add_principal("ops")
    mem.store.set_grant("ops", None, "admin")
    projects.switch(mem, "shop-agent", "shop")
    own = write.add(mem, "shop-agent", entity_name="checkout", content="Checkout calls the auth service")
    shop = mem.store.get_project("shop")
    mem.store.create_entity("auth", "concept", shop["id"])  # the same name in the project: merged
    return {"first": first["id"], "own": own["id"], "shop": shop}


def test_backfill_dry_run_counts_and_moves_nothing(memory):
    seeded = seed_unscoped(memory)
    before = {t: null_rows(memory, t) for t in ("entities", "observations", "relations", "errors", "sessions")}
    plan = projects.backfill(memory, None, name="shop")
    assert plan["dry_run"] is True and plan["project"] == "shop" and plan["project_id"] == seeded["shop"]["id"]
    assert {t: plan["would_move"][t] for t in before} == before
    assert before["observations"] == 2 and before["errors"] == 1 and before["sessions"] == 1
    assert plan["rows"] == sum(plan["would_move"].values()) and "grants" not in plan["would_move"]
    assert plan["entities_to_merge"] == ["auth"]
    assert {t: null_rows(memory, t) for t in before} == before


def test_backfill_moves_every_unscoped_row_and_undo_moves_them_back(memory):
    seeded = seed_unscoped(memory)
    tables = [t for t in memory.store.project_tables() if t != "grants"]
    before = {t: null_rows(memory, t) for t in tables}
    done = projects.backfill(memory, None, name="shop", confirm=True)
    assert done["dry_run"] is False and done["entities_merged"] == ["auth"]
    assert done["moved"]["observations"] == 2 and done["rows_moved"] == sum(done["moved"].values())
    assert {t: null_rows(memory, t) for t in tables} == dict.fromkeys(tables, 0)
    assert [g["project_id"] for g in memory.store.grants_of("ops")] == [None]  # a '*' grant stays one
    shop_scope = memory.scope("shop-agent")
    auths = [e for e in memory.store.entity_names(shop_scope) if e["name"] == "auth"]
    assert len(auths) == 1  # the unscoped 'auth' went into the project's own
    obs = memory.store.get_observation(seeded["first"], shop_scope)
    assert obs is not None and obs.entity_id == auths[0]["id"]
    events = [e for e in audit.tail(memory, None, limit=20)["entries"] if e["action"] == "project.backfill"]
    assert events and events[0]["payload"]["undo_file"] == Path(done["undo_file"]).name

    from cuba_memorys.services.lifecycle import undo

    back = undo.apply(memory, done["undo_file"])
    assert back["moved_back"]["observations"] == 2
    assert {t: null_rows(memory, t) for t in tables} == before
    restored = memory.store.get_observation(seeded["first"], memory.scope(None))
    assert restored is not None and restored.entity_id != auths[0]["id"]  # its own 'auth' again
    assert memory.store.get_observation(seeded["own"], shop_scope) is not None  # the project's row stayed
    again = undo.apply(memory, back["undo_file"])  # and the undo can be undone
    assert again["moved_back"]["observations"] == 2 and null_rows(memory, "observations") == 0


def test_backfill_refuses_bad_input_and_conflicts_and_writes_nothing(memory):
    seed_unscoped(memory)
    procedures.add(memory, None, name="flush", steps=[{"do": "flush the cache"}])
    moved = null_rows(memory, "observations")
    cases = [({}, InvalidInput, "name"), ({"name": "*"}, InvalidInput, "name"),
             ({"name": "nowhere", "confirm": True}, NotFound, "nowhere"),
             ({"name": "shop", "confirm": "yes"}, InvalidInput, "confirm")]
    for args, error, text in cases:
        with pytest.raises(error, match=text):
            projects.backfill(memory, None, **args)
    procedures.add(memory, "shop-agent", name="flush", steps=[{"do": "flush the shop cache"}])
    with pytest.raises(Conflict, match="flush"):
        projects.backfill(memory, None, name="shop", confirm=True)
    assert null_rows(memory, "observations") == moved
    assert not memory.settings.undo_dir.exists() or not list(memory.settings.undo_dir.glob("backfill-*"))


def test_backfill_refuses_to_take_an_entity_another_project_writes_to(memory):
    """A row of project B hanging on an entity of no project (written before entities were per
    project: a project's writes now make its own entity) would vanish from B if the entity moved
    into A: the backfill is refused, naming it, and moves nothing."""
    seed_unscoped(memory)
    write.add(memory, None, entity_name="SharedLib", content="SharedLib wraps the HTTP client")
    projects.switch(memory, "b-agent", "other")
    shared = memory.store.get_entity("SharedLib", memory.scope(None))
    written = {"id": memory.store.add_observation(NewObservation(
        shared.id, "In other it is pinned to 2.x", project_id=memory.client("b-agent").project_id))}
    held = memory.store.get_observation(written["id"], memory.scope("b-agent"))
    assert held is not None
    moved = null_rows(memory, "observations")
    for confirm in (False, True):
        with pytest.raises(Conflict, match="SharedLib"):
            projects.backfill(memory, None, name="shop", confirm=confirm)
    assert null_rows(memory, "observations") == moved
    assert memory.store.get_observation(written["id"], memory.scope("b-agent")) == held


def test_backfill_needs_admin_on_every_project(memory):
    seed_unscoped(memory)
    assert catalog.tool("cuba_proyecto").action("backfill").role == "admin"
    memory.store.add_principal("dev")
    memory.store.set_grant("dev", memory.store.get_project("shop")["id"], "admin")
    dev, ops = access.load(memory, "dev"), access.load(memory, "ops")
    with pytest.raises(AccessDenied, match=r"'\*' grant of admin"):
        access.check(memory, None, dev, "cuba_proyecto", "backfill", "admin", {"name": "shop"})
    access.check(memory, None, ops, "cuba_proyecto", "backfill", "admin", {"name": "shop"})


def test_backfill_over_mcp(location: StoreLocation):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="legacy", content="Written before projects")
        await agent.call("cuba_proyecto", action="switch", name="shop")
        plan = await agent.call("cuba_proyecto", action="backfill", name="shop")
        found_before = await agent.call("cuba_faro", query="Written before projects", track_access=False)
        done = await agent.call("cuba_proyecto", action="backfill", name="shop", confirm=True)
        found_after = await agent.call("cuba_faro", query="Written before projects", track_access=False)
        errors = [await agent.error("cuba_proyecto", action="backfill"),
                  await agent.error("cuba_proyecto", action="backfill", name="nowhere"),
                  await agent.call("cuba_proyecto", action="switch", name="shop", confirm=True)]  # ignored
        return plan, found_before, done, found_after, errors

    plan, found_before, done, found_after, errors = run_stdio(location, body, **NO_MODEL)
    assert plan["would_move"]["observations"] == 1 and plan["would_move"]["entities"] == 1
    assert found_before["count"] == 0  # rows of no project are left out with a project active
    assert done["moved"]["observations"] == 1 and Path(done["undo_file"]).exists()
    assert found_after["results"][0]["c"] == "Written before projects"
    assert "name" in errors[0] and "nowhere" in errors[1] and errors[2]["ignored"] == ["confirm"]


def cli(where: StoreLocation, *args: str, check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(SERVER_BIN), *args], env=where.env(**NO_MODEL), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == check, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_project_backfill_cli_plan_apply_and_undo(location: StoreLocation):
    mem = Memory.open(replace(settings_for(location), embed_model="none"))
    try:
        write.add(mem, None, entity_name="legacy", content="Written before projects")
        mem.store.get_or_create_project("shop")
    finally:
        mem.close()
    plan = json.loads(cli(location, "project", "backfill", "shop", "--json").stdout)
    assert plan["dry_run"] is True and plan["would_move"]["observations"] == 1
    text = cli(location, "project", "backfill", "shop").stdout
    assert "Would move into 'shop': " in text and "1 observations" in text and "--apply" in text
    done = json.loads(cli(location, "project", "backfill", "shop", "--apply", "--json").stdout)
    assert done["moved"]["observations"] == 1
    undone = cli(location, "undo", done["undo_file"]).stdout
    assert "moved back" in undone and "1 observations" in undone
    missing = cli(location, "project", "backfill", "nowhere", check=2)
    assert "error:" in missing.stderr and "nowhere" in missing.stderr
    again = json.loads(cli(location, "project", "backfill", "shop", "--json").stdout)
    assert again["would_move"]["observations"] == 1  # back without a project


# -- scope=errors -------------------------------------------------------------------------------
def seed_errors(mem: Memory) -> None:
    write.add(mem, None, entity_name="redis", content="Redis timeout errors came from the proxy pool",
              observation_type="lesson")
    write.add(mem, None, entity_name="redis", content="Tagged note on redis timeout #infra")
    incidents.report(mem, None, error_type="TimeoutError", error_message="redis timeout while reading sessions")


def test_scope_errors_returns_only_errors_and_ignores_tags(memory):
    seed_errors(memory)
    for extra in ({}, {"tags": "infra"}, {"associative": True}, {"query": "redis timeout category:infra"}):
        args = {"query": "redis timeout", "scope": "errors", "track_access": False, **extra}
        found = faro.faro(memory, None, **args)
        assert found["count"] >= 1 and {r["t"] for r in found["results"]} == {"error"}, extra
        assert ("tags_ignored_reason" in found) == ("tags" in extra or "category" in args["query"])
    entities_only = faro.faro(memory, None, query="redis", scope="entities", tags="infra", track_access=False)
    assert {r["t"] for r in entities_only["results"]} == {"entity"} and "scope=entities" in \
        entities_only["tags_ignored_reason"]
    tagged = faro.faro(memory, None, query="redis timeout", scope="observations", tags="infra", track_access=False)
    assert "tags_ignored_reason" not in tagged and tagged["results"][0]["c"].startswith("Tagged note")


def test_scope_errors_over_mcp(location: StoreLocation):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="redis", content="Redis timeout notes")
        await agent.call("cuba_alarma", error_type="TimeoutError", error_message="redis timeout on login")
        return [await agent.call("cuba_faro", query="redis timeout", scope=scope, tags="infra", associative=True)
                for scope in ("errors", "all")]

    errors_only, everything = run_stdio(location, body, **NO_MODEL)
    assert [r["t"] for r in errors_only["results"]] == ["error"] and "tags_ignored_reason" in errors_only
    assert {r["t"] for r in everything["results"]} >= {"error", "fact"} and "tags_ignored_reason" not in everything


# -- the session boost ----------------------------------------------------------------------------
def test_a_goal_naming_the_entity_boosts_by_1_3(memory):
    write.batch_add(memory, None, [
        {"entity_name": "payments", "content": "The retry queue backs off exponentially for card charges"},
        {"entity_name": "search-index", "content": "The retry queue backs off slowly while reindexing"},
        {"entity_name": "misc", "content": "The mail queue is drained every hour"},
        {"entity_name": "misc", "content": "Retry budgets are set per team"}])
    query = {"query": "retry queue backs off", "scope": "observations", "track_access": False}
    plain = {r["e"]: r["s"] for r in faro.faro(memory, "a", **query)["results"] if r["e"] != "misc"}
    assert min(plain.values()) > 0  # not the bottom of every branch, where min-max scaling gives 0
    sessions.start(memory, "a", name="fix", goals=["harden Payments against outages"])
    boosted = faro.faro(memory, "a", format="verbose", **query)
    rows = {r["entity_name"]: r for r in boosted["results"]}
    assert rows["payments"]["score"] == pytest.approx(plain["payments"] * 1.3, rel=1e-3)
    assert rows["payments"]["session_boosted"] is True and rows["search-index"]["session_boosted"] is False
    assert rows["search-index"]["score"] == pytest.approx(plain["search-index"], rel=1e-3)  # no goal word
    scores = [r["score"] for r in boosted["results"]]
    assert scores == sorted(scores, reverse=True)


def test_the_boost_resorts_and_names_match_as_whole_words():
    from cuba_memorys.search.fusion import Fused
    from cuba_memorys.search.hybrid import session_boost

    fused = [Fused("observation", "1", 1.0), Fused("observation", "2", 0.9), Fused("observation", "3", 0.8),
             Fused("error", "4", 0.7)]
    rows = {("observation", "1"): {"entity_name": "billing", "content": "x"},
            ("observation", "2"): {"entity_name": "Auth Service", "content": "y"},
            ("observation", "3"): {"entity_name": "auth", "content": "z"},
            ("error", "4"): {"error_type": "auth", "error_message": "auth failed"}}
    out = session_boost(fused, rows, frozenset({"fix"}), ("Fix the auth-service login",))
    assert [f.id for f in out] == ["2", "3", "1", "4"]  # 0.9·1.3, 0.8·1.3, then 1.0, then the error
    assert out[0].score == pytest.approx(1.17) and out[1].score == pytest.approx(1.04)
    assert "session" not in out[2].branch_scores and out[3].score == pytest.approx(0.7)
    none = session_boost([Fused("observation", "3", 0.8)], rows, frozenset({"deploy"}), ("reauthorize deploys",))
    assert none[0].score == pytest.approx(0.8)  # "auth" inside "reauthorize" is not a mention


def test_goal_words_still_boost_when_no_goal_names_the_entity(memory):
    write.batch_add(memory, None, [
        {"entity_name": "cache", "content": "The cache layer uses Redis with a five minute TTL"},
        {"entity_name": "cache", "content": "A cache miss costs one database read"}])
    assert memory.wait_for_embeddings(120)  # both searches see the same vectors: only the boost differs
    query = {"query": "cache layer", "scope": "observations", "track_access": False}
    plain = faro.faro(memory, "a", **query)["results"][0]["s"]
    sessions.start(memory, "a", name="ttl", goals=["tune the Redis TTL"])
    boosted = faro.faro(memory, "a", **query)["results"][0]["s"]
    assert plain > 0
    assert boosted == pytest.approx(plain * (1 + 0.3 * 2 / 3), rel=1e-3)  # redis, ttl of tune/redis/ttl


def test_session_boost_over_mcp(location: StoreLocation):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="payments",
                         content="Retries back off exponentially for card charges")
        await agent.call("cuba_cronica", action="add", entity_name="emails",
                         content="Retries back off slowly for outgoing mail")
        await agent.call("cuba_jornada", action="start", name="w", goals=["make emails reliable"])
        return await agent.call("cuba_faro", query="retries back off", format="verbose", scope="observations")

    found = run_stdio(location, body, **NO_MODEL)
    boosted = {r["entity_name"]: r["session_boosted"] for r in found["results"]}
    assert boosted == {"emails": True, "payments": False}


# -- query_class ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("query", "expected"), [
    ("What are the main themes of this repo?", "global"), ("Resumen del corpus, por favor", "global"),
    ("¿Qué cubre la documentación?", "global"), ("Give me an OVERVIEW OF billing", "global"),
    ("How does auth talk to billing?", "multi_hop"), ("¿Cómo se relaciona el pago con el envío?", "multi_hop"),
    ("Por que falla el deploy", "multi_hop"), ("¿Por qué falla?", "multi_hop"), ("path between a and b", "multi_hop"),
    ("El worker depende de Redis", "multi_hop"), ("causes of the outage", "multi_hop"),
    ("multi-hop question", "multi_hop"), ("Where is the billing config?", "factoid"),
    ("show isolation levels", "factoid"), ("relacionado", "factoid"), ("", "factoid"),
])
def test_query_class_rules(query: str, expected: str):
    assert classify(query) == expected


def test_faro_reports_query_class_over_mcp(location: StoreLocation):
    async def body(agent):
        await agent.call("cuba_cronica", action="add", entity_name="auth", content="Auth issues JWTs")
        return [(await agent.call("cuba_faro", query=q))["query_class"]
                for q in ("how does auth work", "main themes", "auth JWT", "auth code:auth")]

    assert run_stdio(location, body, **NO_MODEL) == ["multi_hop", "global", "factoid", "factoid"]


# -- the entity-factoid leg ---------------------------------------------------------------------
def seed_people(mem: Memory) -> None:
    write.batch_add(mem, None, [
        {"entity_name": "Melanie", "content": "I painted a lake sunrise last year"},
        {"entity_name": "Melanie", "content": "My kids love the beach in summer"},
        {"entity_name": "Caroline", "content": "Melanie showed me her sunrise painting"},
        {"entity_name": "Bo", "content": "Bo painted the fence"}])


def test_entity_factoid_leg_when_on(open_memory):
    mem = open_memory(entity_factoid=True)
    seed_people(mem)
    found = faro.faro(mem, None, query="When did Melanie paint a sunrise?", track_access=False)
    assert found["query_class"] == "factoid"
    assert {r["t"] for r in found["results"]} == {"fact"}  # scope all became observations
    marked = [r for r in found["results"] if r.get("entity_factoid")]
    assert marked and {r["e"] for r in marked} == {"Melanie"}
    multi = faro.faro(mem, None, query="How does Melanie relate to Caroline?", track_access=False)
    assert not any(r.get("entity_factoid") for r in multi["results"])  # multi_hop: no leg
    short = faro.faro(mem, None, query="What did Bo paint?", track_access=False)
    assert not any(r.get("entity_factoid") for r in short["results"])  # names under 4 characters
    errors = faro.faro(mem, None, query="Melanie sunrise", scope="entities", track_access=False)
    assert {r["t"] for r in errors["results"]} == {"entity"}  # another scope is left as asked


def test_entity_factoid_is_off_by_default_and_strictly_scoped(open_memory):
    mem = open_memory()
    assert mem.settings.entity_factoid is False
    seed_people(mem)
    off = faro.faro(mem, None, query="When did Melanie paint a sunrise?", track_access=False)
    assert not any(r.get("entity_factoid") for r in off["results"])
    on = open_memory(entity_factoid=True)
    projects.switch(on, "p", "elsewhere")
    scoped = faro.faro(on, "p", query="When did Melanie paint a sunrise?", include_unscoped=True,
                       track_access=False)
    assert scoped["count"] >= 1 and not any(r.get("entity_factoid") for r in scoped["results"])
    on.store.create_entity("Melanie", "person", on.client("p").project_id)  # the project's own Melanie
    write.add(on, "p", entity_name="Melanie", content="I painted the sunrise over the harbour")
    mine = faro.faro(on, "p", query="When did Melanie paint a sunrise?", include_unscoped=True, track_access=False)
    marked = [r for r in mine["results"] if r.get("entity_factoid")]
    assert [r["c"] for r in marked] == ["I painted the sunrise over the harbour"]


def test_entity_factoid_setting_is_read_from_the_environment(monkeypatch):
    from cuba_memorys.config import Settings

    for raw, expected in (("on", True), ("off", False), ("", False), ("1", True), ("false", False)):
        monkeypatch.setenv("CUBA_ENTITY_FACTOID", raw)
        assert Settings.from_env().entity_factoid is expected, raw
