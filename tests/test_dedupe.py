"""`cuba-memorys dedupe` (spec §4h): exact groups merge with --apply, probable pairs only on the
judge's word; a merge moves everything in one transaction, keeps the old name as an alias that
the tools resolve, is audited, and `undo` brings both entities back."""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import SERVER_BIN, StoreLocation, settings_for
from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.services.graph import aliases, entities, episodes, projects, relations
from cuba_memorys.services.lifecycle import undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.storage.rows import EntityNameRow
from cuba_memorys.text import trigram_similarity
from mcp_helpers import run_stdio
from tiny_models import build_nli_model


@pytest.fixture
def mem(memory: Memory, tmp_path: Path) -> Memory:
    memory.settings = replace(memory.settings, undo_dir=tmp_path / "undo")
    return memory


def names_of(mem: Memory) -> set[str]:
    return {r["name"] for r in mem.store.entity_names(mem.scope(None))}


def rows_about(mem: Memory, *entity_ids: str) -> dict[str, list[dict]]:
    """Every row that names these entities, as undo files hold them (sorted, comparable)."""
    ids = list(entity_ids)
    def key(row: dict) -> str:
        return json.dumps(row, sort_keys=True)
    found = {
        "entities": mem.store.snapshot_rows("entities", "id", ids),
        "observations": mem.store.snapshot_rows("observations", "entity_id", ids),
        "episodes": mem.store.snapshot_rows("episodes", "entity_id", ids),
        "facts": mem.store.snapshot_rows("facts", "subject_entity_id", ids),
        "relations": mem.store.snapshot_rows("relations", "from_entity_id", ids)
        + mem.store.snapshot_rows("relations", "to_entity_id", ids),
        "entity_aliases": mem.store.snapshot_rows("entity_aliases", "entity_id", ids),
    }
    return {table: sorted({key(r): r for r in rows}.values(), key=key) for table, rows in found.items()}


def test_similar_name_pairs_finds_exactly_what_comparing_every_pair_finds():
    rnd = random.Random(7)
    stems = ["auth", "billing", "postgres", "payments", "gateway", "search", "indexer", "worker"]
    rows = []
    for n in range(300):
        name = rnd.choice(stems) + rnd.choice(["", "-service", " service", "s", "-api", "_db", "2", " worker"])
        if rnd.random() < 0.3:
            name = name[:-1] if len(name) > 4 else name + "x"  # a typo
        rows.append(EntityNameRow(id=str(n), name=name, entity_type="concept",
                                  project_id=rnd.choice([None, "p1"]), observation_count=0))
    found = {(i, j) for i, j, _ in aliases.similar_name_pairs(rows)}
    brute = {(i, j) for i in range(len(rows)) for j in range(i + 1, len(rows))
             if rows[i]["project_id"] == rows[j]["project_id"]
             and trigram_similarity(rows[i]["name"], rows[j]["name"]) > 0.70
             and not aliases.differ_only_in_numbers(rows[i]["name"], rows[j]["name"])}
    assert found == brute and len(brute) > 50


def test_names_that_differ_only_in_their_numbers_are_never_a_probable_pair(mem: Memory):
    # a conversation store's sessions (issue 30: 100 false pairs on 5,000 entities, one click fused two)
    for n in (1, 2, 12):
        write.add(mem, None, entity_name=f"conv-26:session_{n}", content=f"session {n} of conversation 26")
    for name in ("ipv4", "ipv6", "Redis", "Redis 7", "payments-gateway", "payments-gateways"):
        entities.create(mem, None, name)
    plan = aliases.dedupe(mem, None)
    pairs = [{pair["a"]["name"], pair["b"]["name"]} for pair in plan["probable_pairs"]]
    assert pairs == [{"payments-gateway", "payments-gateways"}], pairs  # a letter apart: still offered
    assert plan["exact_groups"] == [] and aliases.duplicate_candidates(mem) == 1  # the cycle's count agrees
    assert aliases.differ_only_in_numbers("conv-26:session_1", "conv-26:session_2")
    assert not aliases.differ_only_in_numbers("Session 1", "session-1")  # the same name: an exact group


def test_the_plan_lists_exact_groups_and_probable_pairs_and_changes_nothing(mem: Memory):
    write.add(mem, None, entity_name="Auth-Service", content="The auth service issues JWT tokens for one hour")
    write.add(mem, None, entity_name="auth service", content="Login goes through OAuth with Google")
    write.add(mem, None, entity_name="auth service", content="Sessions are stored in Redis")
    write.add(mem, None, entity_name="payments-gateway", content="Stripe webhooks land on the gateway")
    write.add(mem, None, entity_name="payments-gateways", content="The gateway retries webhooks three times")
    entities.create(mem, None, "unrelated")
    plan = aliases.dedupe(mem, None)
    assert plan["dry_run"] and plan["merged"] == [] and plan["would_merge"] == 1
    [group] = plan["exact_groups"]
    assert group["winner"]["name"] == "auth service" and group["winner"]["observations"] == 2  # most observations
    assert [r["name"] for r in group["losers"]] == ["Auth-Service"]
    [pair] = plan["probable_pairs"]
    assert {pair["a"]["name"], pair["b"]["name"]} == {"payments-gateway", "payments-gateways"}
    assert pair["similarity"] > 0.7 and "judgment" not in pair
    assert len(names_of(mem)) == 5

    applied = aliases.dedupe(mem, None, apply=True)
    [merged] = applied["merged"]
    assert (merged["loser"], merged["winner"]) == ("Auth-Service", "auth service")
    assert merged["moved"]["observations"] == 1 and Path(merged["undo_file"]).is_file()
    assert "Auth-Service" not in names_of(mem) and len(names_of(mem)) == 4
    assert len(applied["probable_pairs"]) == 1  # no judge: the near match stays listed, unmerged
    assert {"payments-gateway", "payments-gateways"} <= names_of(mem)
    assert [r["action"] for r in mem.store.audit_rows(0, 10)] == ["memory.dedupe_merge"]


def test_ties_go_to_the_older_entity(mem: Memory):
    entities.create(mem, None, "CI")
    entities.create(mem, None, "ci")
    [group] = aliases.dedupe(mem, None)["exact_groups"]
    assert group["winner"]["name"] == "CI" and group["losers"][0]["name"] == "ci"


def build_graph(mem: Memory) -> dict[str, str]:
    """auth (the loser) with observations, an episode, an alias and edges of every kind."""
    write.add(mem, None, entity_name="auth", content="Tokens are signed with RS256")
    write.add(mem, None, entity_name="auth", content="Refresh tokens live for 30 days")
    write.add(mem, None, entity_name="auth-service", content="The service runs three replicas")
    episodes.add(mem, None, entity_name="auth", content="We rotated the signing key after the incident")
    for name in ("db", "cache", "api"):
        entities.create(mem, None, name)
    relations.create(mem, None, "auth", "db", "uses")             # moves to auth-service -> db
    relations.create(mem, None, "api", "auth", "depends_on")      # moves to api -> auth-service
    relations.create(mem, None, "auth", "auth-service", "related_to")  # would be a self-edge: dropped
    relations.create(mem, None, "auth", "cache", "uses")          # auth-service already has it: dropped
    relations.create(mem, None, "auth-service", "cache", "uses")
    ids = {e: entities.find_entity(mem, None, e).id for e in ("auth", "auth-service", "db", "cache", "api")}
    mem.store.add_alias(ids["auth"], "autenticación", None)
    return ids


def test_a_merge_moves_everything_and_undo_brings_both_back(mem: Memory):
    ids = build_graph(mem)
    before = rows_about(mem, ids["auth"], ids["auth-service"])
    plan = aliases.dedupe(mem, None, merge="auth", into="auth-service")
    assert plan["dry_run"] and plan["would_merge"]["loser"]["name"] == "auth"
    assert rows_about(mem, ids["auth"], ids["auth-service"]) == before  # a plan changes nothing

    [merged] = aliases.dedupe(mem, None, merge="auth", into="auth-service", apply=True)["merged"]
    assert merged["moved"] == {"observations": 2, "episodes": 1, "facts": 2, "relations_moved": 2,
                               "relations_dropped": 2, "aliases": 2}
    assert mem.store.get_entity_by_id(ids["auth"]) is None
    kept = entities.find_entity(mem, None, "auth-service")  # read without the access boost a get gives
    assert len(mem.store.observations_of(kept.id, mem.scope(None))) == 3
    assert {(r["entity"], r["type"], r["direction"]) for r in entities.relation_views(mem, None, kept)} == {
        ("db", "uses", "outgoing"), ("api", "depends_on", "incoming"), ("cache", "uses", "outgoing")}
    assert set(mem.store.aliases_of(ids["auth-service"])) == {"auth", "autenticación"}
    assert [e["content"] for e in episodes.list_for(mem, None, entity_name="auth-service")["episodes"]] == [
        "We rotated the signing key after the incident"]
    [event] = [r for r in mem.store.audit_rows(0, 10) if r["action"] == "memory.dedupe_merge"]
    payload = json.loads(event["payload"])
    assert payload["loser_id"] == ids["auth"] and payload["winner_id"] == ids["auth-service"]
    assert payload["counts"]["observations"] == 2

    back = undo.apply(mem, merged["undo_file"])
    assert back["removed"] == {"entity_aliases": 1}  # the alias the merge created
    assert rows_about(mem, ids["auth"], ids["auth-service"]) == before
    assert entities.get(mem, None, "auth")["observation_count"] == 2
    assert mem.store.aliases_of(ids["auth-service"]) == []


def test_manual_merge_refuses_bad_input_and_changes_nothing(mem: Memory):
    ids = build_graph(mem)
    before = rows_about(mem, ids["auth"], ids["auth-service"])
    with pytest.raises(InvalidInput, match="into"):
        aliases.dedupe(mem, None, merge="auth", apply=True)
    with pytest.raises(InvalidInput, match="merge"):
        aliases.dedupe(mem, None, into="auth", apply=True)
    with pytest.raises(NotFound, match="ghost"):
        aliases.dedupe(mem, None, merge="ghost", into="auth", apply=True)
    with pytest.raises(InvalidInput, match="nothing to merge"):
        aliases.dedupe(mem, None, merge="auth", into="auth", apply=True)
    projects.switch(mem, "other", "elsewhere")
    entities.create(mem, "other", "auth-v2")
    with pytest.raises(InvalidInput, match="another project"):
        aliases.dedupe(mem, None, merge="auth", into="auth-v2", apply=True)
    with pytest.raises(NotFound, match="nowhere"):
        aliases.dedupe(mem, None, project="nowhere")
    assert rows_about(mem, ids["auth"], ids["auth-service"]) == before
    assert not mem.settings.undo_dir.exists() or not list(mem.settings.undo_dir.iterdir())


def test_groups_never_span_projects(mem: Memory):
    projects.switch(mem, "a", "alpha")
    entities.create(mem, "a", "Billing")
    projects.switch(mem, "b", "beta")
    entities.create(mem, "b", "billing")
    plan = aliases.dedupe(mem, None)
    assert plan["exact_groups"] == [] and plan["probable_pairs"] == []
    entities.create(mem, "b", "BILLING")
    [group] = aliases.dedupe(mem, None, project="beta")["exact_groups"]
    assert group["winner"]["project"] == "beta" and group["losers"][0]["name"] == "BILLING"


def test_judged_groups_with_a_pair_judged_different_are_rejected_whole():
    rows = [EntityNameRow(id=x, name=x, entity_type="concept", project_id=None, observation_count=n)
            for x, n in (("a", 1), ("b", 3), ("c", 0), ("d", 2), ("e", 2))]
    a, b, c, d, e = rows
    pairs = [(a, b, 0.8), (b, c, 0.8), (a, c, 0.8), (d, e, 0.8)]
    judged = [{"same": True}, {"same": True}, {"same": False}, {"same": True}]
    assert aliases.judged_merges(pairs, judged, rows) == [(d, e)]  # a-b-c holds a "different" pair
    judged[2] = {"same": None}
    assert aliases.judged_merges(pairs, judged, rows) == [(b, a), (b, c), (d, e)]  # winner: most observations


def test_probable_pairs_merge_only_on_the_judges_word(memory: Memory, tmp_path: Path, open_memory):
    same = "The ledger service reconciles payouts nightly"
    write.add(memory, None, entity_name="ledger-svc", content=same)
    write.add(memory, None, entity_name="ledger-svcs", content=same + " for every merchant")
    write.add(memory, None, entity_name="inventory-api", content="Stock counts sync from the warehouse")
    write.add(memory, None, entity_name="inventory-apis", content="Prices are cached for ten minutes")
    plain = aliases.dedupe(memory, None, judge=True, apply=True)  # no NLI model, no client model: unknown
    assert plain["merged"] == [] and len(plain["probable_pairs"]) == 2
    assert {p["judgment"]["same"] for p in plain["probable_pairs"]} == {None}

    words = set((same + " for every merchant Stock counts sync from the warehouse Prices are cached for ten"
                 " minutes").lower().split())
    model = build_nli_model(tmp_path / "nli", words=words)
    judged_mem = open_memory(nli_path=model, undo_dir=tmp_path / "undo")
    plan = aliases.dedupe(judged_mem, None, judge=True)
    assert plan["judge"] == "nli" and plan["would_merge"] == 1 and plan["merged"] == []
    verdicts = {frozenset((p["a"]["name"], p["b"]["name"])): p["judgment"] for p in plan["probable_pairs"]}
    assert verdicts[frozenset(("ledger-svc", "ledger-svcs"))]["same"] is True
    assert verdicts[frozenset(("inventory-api", "inventory-apis"))]["same"] is False
    [merged] = aliases.dedupe(judged_mem, None, judge=True, apply=True)["merged"]
    assert (merged["loser"], merged["winner"]) == ("ledger-svcs", "ledger-svc")
    assert {"inventory-api", "inventory-apis", "ledger-svc"} <= names_of(judged_mem)
    assert "ledger-svcs" not in names_of(judged_mem)


# -- through the command line and the MCP client ---------------------------------------------

def cli(where: StoreLocation, undo_dir: Path, *args: str, check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(SERVER_BIN), *args], env=where.env(CUBA_UNDO_DIR=str(undo_dir)),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert proc.returncode == check, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def seed(where: StoreLocation, *items: tuple[str, str]) -> None:
    mem = Memory.open(settings_for(where))
    try:
        for name, content in items:
            write.add(mem, None, entity_name=name, content=content)
    finally:
        mem.close()


def test_cli_dedupe(location: StoreLocation, tmp_path: Path):
    undo_dir = tmp_path / "undo"
    seed(location, ("Redis", "Sessions are cached in Redis"), ("redis", "Redis runs with 2 GB of memory"),
         ("redis", "Eviction policy is allkeys-lru"), ("grafana", "Dashboards live in Grafana"))
    listed = cli(location, undo_dir, "dedupe").stdout
    assert "exact:    'redis' (2) <- 'Redis' (1)" in listed and "--apply" in listed
    plan = json.loads(cli(location, undo_dir, "dedupe", "--json").stdout)
    assert plan["dry_run"] and plan["would_merge"] == 1 and not undo_dir.exists()
    err = cli(location, undo_dir, "dedupe", "--merge", "grafana", check=2).stderr
    assert err.startswith("error: into:") and "--into" in err
    manual = cli(location, undo_dir, "dedupe", "--merge", "grafana", "--into", "redis").stdout
    assert "Would merge 'grafana' into 'redis'" in manual
    done = json.loads(cli(location, undo_dir, "dedupe", "--apply", "--json").stdout)
    assert [m["loser"] for m in done["merged"]] == ["Redis"]
    assert json.loads(cli(location, undo_dir, "dedupe", "--json").stdout)["exact_groups"] == []
    restored = cli(location, undo_dir, "undo", done["merged"][0]["undo_file"]).stdout
    assert "restored 1 entities" in restored
    assert len(json.loads(cli(location, undo_dir, "dedupe", "--json").stdout)["exact_groups"]) == 1


def test_tools_resolve_the_merged_name_through_mcp(location: StoreLocation, tmp_path: Path):
    mem = Memory.open(replace(settings_for(location), undo_dir=tmp_path / "undo"))
    try:
        write.add(mem, None, entity_name="k8s", content="Clusters are upgraded every quarter")
        write.add(mem, None, entity_name="kubernetes", content="Workloads run on Kubernetes 1.31")
        aliases.dedupe(mem, None, merge="k8s", into="kubernetes", apply=True)
    finally:
        mem.close()

    async def body(agent):
        got = await agent.call("cuba_alma", action="get", name="k8s")
        added = await agent.call("cuba_cronica", action="add", entity_name="k8s",
                                 content="Node pools autoscale between 3 and 12 nodes")
        listed = await agent.call("cuba_cronica", action="list", entity_name="kubernetes")
        created = await agent.call("cuba_alma", action="create", name="k8s")
        return got, added, listed, created

    got, added, listed, created = run_stdio(location, body, CUBA_UNDO_DIR=str(tmp_path / "undo"))
    assert got["entity"]["name"] == "kubernetes" and got["observation_count"] == 2
    assert added["id"] in [o["id"] for o in listed["observations"]]
    assert created["already_existed"] is True and created["entity"]["name"] == "kubernetes"
