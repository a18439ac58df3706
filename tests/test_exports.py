"""The offline exports: dashboard HTML, Obsidian vault, MCP memory JSONL (out and in), skills."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import SERVER_BIN, StoreLocation, new_location, settings_for
from cuba_memorys.errors import Conflict, InvalidInput
from cuba_memorys.services.exports import dashboard, mcp_jsonl, obsidian, skills
from cuba_memorys.services.graph import relations
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write
from cuba_memorys.services.workflow import procedures

HOSTILE = '<script>alert(1)</script> [[Evil]] "q" & </script>'


def seed(mem: Memory) -> None:
    write.add(mem, None, entity_name="auth", content="tokens are rotated every 24 hours by the gateway")
    write.add(mem, None, entity_name="auth", content="we decided on short-lived JWTs", observation_type="decision")
    write.add(mem, None, entity_name="postgres", content="the primary database runs PostgreSQL 17")
    write.add(mem, None, entity_name=HOSTILE, content=f"hostile content {HOSTILE}")
    write.add(mem, None, entity_name="lonely", content="an entity with no relations at all")
    relations.create(mem, None, "auth", "postgres", "depends_on")
    relations.create(mem, None, HOSTILE, "auth", "uses")


def read_jsonl(path: Path) -> tuple[dict[str, tuple[str, list[str]]], list[tuple[str, str, str]]]:
    """A memory.jsonl as what it says: each entity's type and observations (in order), and the
    relations (in any order: the MCP server keeps no order among them)."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    entities = {x["name"]: (x["entityType"], x["observations"]) for x in lines if x["type"] == "entity"}
    return entities, sorted((x["from"], x["to"], x["relationType"]) for x in lines if x["type"] == "relation")


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_dashboard_escapes_matches_the_store_and_pins_its_script(memory: Memory, tmp_path: Path):
    seed(memory)
    out = tmp_path / "dash.html"
    result = dashboard.write(memory, None, out=str(out))
    page = out.read_text(encoding="utf-8")
    assert result["path"] == str(out.resolve())
    assert result["counts"] == {"observations": 5, "entities": 4, "facts": memory.store.offline_facts_count(
        memory.scope(None)), "relations": 2}
    assert result["connectivity"] == {"connected": 3, "isolated": 1, "percent": 75.0}
    # no hostile markup survives anywhere: escaped in the HTML, \u003c in the JSON
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script") == 2 and page.count("</script>") == 2
    blob = re.search(r'<script type="application/json" id="recent-data">(.*?)</script>', page, re.S).group(1)
    recent = json.loads(blob)
    assert {o["entity"] for o in recent} == {"auth", "postgres", HOSTILE, "lonely"} and len(recent) == 5
    # the CSP allows exactly the one inline script and style, by hash
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1))
    assert f"script-src {_hash(script)};" in csp and f"style-src {_hash(style)};" in csp
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert 'id="filter"' in page and 'data-max="60"' in page and "recent-data" in script
    assert re.search(r'id="count-relations"><b>2</b>', page)
    assert "lonely" in page and 'class="tag">isolated<' in page
    assert re.search(r'<span id="verdict" class="pill (healthy|warnings|degraded)">', page)
    report = dashboard.doctor(memory)
    rows = dashboard.health_rows(report)
    assert page.count('<span class="dot ') == result["checks"] == len(rows) >= 5
    assert len({r["detail"] for r in rows}) == len(rows)  # a doctor warning is not shown twice
    label, failures, warnings = dashboard.verdict(rows)
    assert result["verdict"] == label and f"{failures} failure(s), {warnings} warning(s)" in page
    with pytest.raises(InvalidInput):
        dashboard.write(memory, None, out=str(tmp_path))  # a directory is no file name


def test_obsidian_vault_notes_links_index_and_refusals(memory: Memory, tmp_path: Path):
    seed(memory)
    vault = tmp_path / "vault"
    result = obsidian.export(memory, None, directory=str(vault))
    assert result["notes"] == 4 and result["isolated"] == 1
    names = sorted(p.name for p in vault.iterdir())
    assert "README.md" in names and "auth.md" in names and "postgres.md" in names and "lonely.md" in names
    hostile = [n for n in names if n.startswith("_script_") or "alert" in n]
    assert len(hostile) == 1 and "/" not in hostile[0] and "[" not in hostile[0]
    auth = (vault / "auth.md").read_text(encoding="utf-8")
    assert auth.startswith('---\ntype: "concept"\nimportance: ')
    assert re.search(r"^community: \d+$", auth, re.M) and "observations: 2" in auth
    assert "- depends_on → [[postgres]] (strength " in auth
    assert f"- [[{hostile[0][:-3]}]] uses → this" in auth
    assert "### decision" in auth and "we decided on short-lived JWTs" in auth
    evil = (vault / hostile[0]).read_text(encoding="utf-8")
    assert "[[Evil]]" not in evil  # stored text cannot forge a wiki link
    index = (vault / "README.md").read_text(encoding="utf-8")
    assert "- entities: 4" in index and "[[lonely]]" in index.split("## Isolated")[1]
    # the index names the community by the number each note's front matter gives it
    number = re.search(r"^community: (\d+)$", auth, re.M).group(1)
    assert re.search(rf"- community {number} \(3\): ", index)
    # a second export needs --apply; with it, our notes are rewritten and a user's own file stays
    (vault / "my notes.md").write_text("mine", encoding="utf-8")
    with pytest.raises(Conflict, match="--apply"):
        obsidian.export(memory, None, directory=str(vault))
    write.add(memory, None, entity_name="lonely", content="a second observation arrives later")
    obsidian.export(memory, None, directory=str(vault), apply=True)
    assert "a second observation arrives later" in (vault / "lonely.md").read_text(encoding="utf-8")
    assert (vault / "my notes.md").read_text(encoding="utf-8") == "mine"
    # a non-empty directory we did not write is refused even with --apply, and left as it was
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x", encoding="utf-8")
    with pytest.raises(Conflict, match="not written by"):
        obsidian.export(memory, None, directory=str(other), apply=True)
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]


def test_mcp_jsonl_round_trip_plan_and_bad_lines(memory: Memory, backend: str, request, tmp_path: Path):
    seed(memory)
    file = tmp_path / "memory.jsonl"
    out = mcp_jsonl.export(memory, None, path=str(file))
    lines = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
    assert out["entities"] == 4 and out["relations"] == 2 and len(lines) == 6
    auth = next(x for x in lines if x.get("name") == "auth")
    assert auth == {"type": "entity", "name": "auth", "entityType": "concept", "observations": [
        "tokens are rotated every 24 hours by the gateway", "we decided on short-lived JWTs"]}
    assert {"type": "relation", "from": "auth", "to": "postgres", "relationType": "depends_on"} in lines
    with pytest.raises(Conflict):
        mcp_jsonl.export(memory, None, path=str(file))  # exists: needs --apply
    # an MCP file with a foreign relation type: the plan writes nothing, --apply imports it
    file.write_text(file.read_text(encoding="utf-8")
                    + json.dumps({"type": "relation", "from": "postgres", "to": "lonely", "relationType": "hosts"})
                    + "\n", encoding="utf-8")
    where, remove = new_location(backend, tmp_path / "second", request)
    request.addfinalizer(remove)
    target = Memory.open(settings_for(where))
    request.addfinalizer(target.close)
    plan = mcp_jsonl.import_file(target, None, path=str(file))
    assert plan["dry_run"] and plan["entities"] == 4 and plan["observations"] == 5 and plan["relations"] == 3
    assert plan["mapped_relation_types"] == {"hosts": {"to": "related_to", "count": 1}}
    assert plan["mapped_entity_types"] == {} and target.store.offline_entities(target.scope(None)) == []
    done = mcp_jsonl.import_file(target, None, path=str(file), project="imported", apply=True)
    assert done["written"]["entities"] == 4 and done["written"]["relations"] == 3
    scope = target.scope(None)
    got = {(r["from"], r["to"], r["type"]) for r in target.store.offline_relations(scope)}
    assert got == {("auth", "postgres", "depends_on"), (HOSTILE, "auth", "uses"), ("postgres", "lonely", "related_to")}
    contents = {o["content"] for o in target.store.offline_observations(scope)}
    assert "we decided on short-lived JWTs" in contents and "mcp relation: hosts → lonely" in contents
    assert any(e["action"] == "import_mcp_jsonl" for e in target.store.audit_tail(scope, 10))
    # round trip: the imported memory exports the same entities, observations and relation types
    again = tmp_path / "again.jsonl"
    assert mcp_jsonl.export(target, None, path=str(again))["original_types_restored"] == 1
    assert read_jsonl(again) == read_jsonl(file)
    # bad lines: every one reported by number, nothing written
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"entity","name":"ok","observations":["fine"]}\nnot json\n'
                   '{"type":"entity","name":"","observations":[]}\n'
                   '{"type":"relation","from":"ok","to":"ghost","relationType":"uses"}\n'
                   '{"type":"entity","name":"creds","observations":["password=hunter2hunter2"]}\n', encoding="utf-8")
    before = len(target.store.offline_entities(scope))
    with pytest.raises(InvalidInput) as err:
        mcp_jsonl.import_file(target, None, path=str(bad), apply=True)
    assert "line 2" in str(err.value) and "line 3" in str(err.value) and "ghost" in str(err.value)
    assert "line 5" in str(err.value) and "hunter2" not in str(err.value)  # the secret is not echoed
    assert len(target.store.offline_entities(scope)) == before


def test_skills_export_reliability_floor_and_foreign_folders(memory: Memory, tmp_path: Path):
    procedures.add(memory, None, name="Deploy App", steps=[{"do": "build", "run": "make build"}, {"do": "ship"}],
                   trigger="when releasing", preconditions="tests pass", verification="curl /health is 200")
    procedures.add(memory, None, name="flaky", steps=[{"do": "try"}])
    for _ in range(5):
        procedures.outcome(memory, None, "Deploy App", True)
    out = tmp_path / "skills"
    result = skills.export(memory, None, directory=str(out), min_reliability=0.3)
    assert result["written"] == ["deploy-app"] and result["skipped_below_reliability"] == 1
    text = (out / "deploy-app" / "SKILL.md").read_text(encoding="utf-8")
    reliability = procedures.wilson_lower_bound(5, 0)
    assert text.startswith('---\nname: "deploy-app"\ndescription: "when releasing"\n')
    assert f"reliability: {round(reliability, 4)}" in text
    assert "## Preconditions" in text and "make build" in text and "## Verification" in text
    assert skills.export(memory, None, directory=str(out))["written"] == ["deploy-app", "flaky"]  # ours: rewritten
    (out / "flaky" / "SKILL.md").write_text("my own skill", encoding="utf-8")
    with pytest.raises(Conflict, match="flaky"):
        skills.export(memory, None, directory=str(out))
    assert (out / "flaky" / "SKILL.md").read_text(encoding="utf-8") == "my own skill"
    with pytest.raises(InvalidInput):
        skills.export(memory, None, directory=str(out), min_reliability=2)


def cli(where: StoreLocation, *args: str, check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(SERVER_BIN), *args], env=where.env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == check, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_export_verbs_on_the_command_line(location: StoreLocation, memory: Memory, tmp_path: Path):
    seed(memory)
    memory.close()
    page = tmp_path / "d.html"
    assert "Dashboard written to" in cli(location, "dashboard", str(page)).stdout and page.is_file()
    vault = tmp_path / "v"
    assert "4 note(s)" in cli(location, "export", str(vault), "--obsidian").stdout
    assert "--apply" in cli(location, "export", str(vault), "--format", "obsidian", check=2).stderr
    cli(location, "export", str(vault), "--format", "obsidian", "--apply")
    plain = tmp_path / "x"  # no flag: a vault, the original's default format
    assert "4 note(s)" in cli(location, "export", str(plain)).stdout and (plain / "README.md").is_file()
    file = tmp_path / "m.jsonl"
    cli(location, "export", str(file), "--format", "mcp-jsonl")
    plan = json.loads(cli(location, "import", str(file), "--format", "mcp-jsonl", "--json").stdout)
    assert plan["dry_run"] and plan["entities"] == 4
    assert "0 skill(s)" in cli(location, "skills", str(tmp_path / "s")).stdout


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (.ci/run installs it)")
def test_dashboard_filter_works_in_headless_chromium(memory: Memory, tmp_path: Path, backend: str):
    if backend != "sqlite":
        pytest.skip("the page is the same for both backends; one browser run is enough")
    from playwright.sync_api import sync_playwright

    seed(memory)
    for n in range(70):  # more matches than the 60 the filter shows
        write.add(memory, None, entity_name="bulk", content=f"bulk note number {n} about caching layer {n * 7}")
    out = tmp_path / "dash.html"
    dashboard.write(memory, None, out=str(out))
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page()
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(out.as_uri())
        page.wait_for_selector("#hits tr")
        assert page.locator("#hits tr").count() == 60  # 75 observations, at most 60 shown
        page.fill("#filter", "gateway")
        page.wait_for_selector("#hit-count:text('1 match(es)')")
        assert page.locator("#hits tr").count() == 1
        assert "rotated every 24 hours" in page.locator("#hits").inner_text()
        page.fill("#filter", "alert(1)")  # the hostile entity is shown as text, never run
        page.wait_for_selector("#hit-count:text('1 match(es)')")
        assert "<script>alert(1)</script>" in page.locator("#hits").inner_text()
        page.fill("#filter", "caching")
        page.wait_for_selector("#hit-count:text('70 match(es), first 60 shown')")
        browser.close()
    assert problems == []  # no CSP violation, no script error


def test_mcp_jsonl_import_failing_half_way_writes_nothing(memory: Memory, tmp_path: Path, monkeypatch):
    file = tmp_path / "m.jsonl"
    file.write_text('{"type":"entity","name":"a","entityType":"person","observations":["first fact about a"]}\n'
                    '{"type":"entity","name":"b","entityType":"odd","observations":["first fact about b"]}\n'
                    '{"type":"relation","from":"a","to":"b","relationType":"uses"}\n', encoding="utf-8")

    def broken(*args, **kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(mcp_jsonl.relations_svc, "create", broken)  # after every entity and observation
    with pytest.raises(RuntimeError):
        mcp_jsonl.import_file(memory, None, path=str(file), apply=True)
    scope = memory.scope(None)
    assert memory.store.offline_entities(scope) == [] and memory.store.offline_observations(scope) == []
    monkeypatch.undo()
    mcp_jsonl.import_file(memory, None, path=str(file), apply=True)
    types = {e["name"]: e["type"] for e in memory.store.offline_entities(scope)}
    assert types == {"a": "person", "b": "concept"}  # an unknown entity type becomes concept


# -- the MCP memory server's file, in and out again (issue 30 item 4) --------------------------------------
MCP_ENTITIES = [
    ("Ada Lovelace", "person"), ("Grace Hopper", "Person"), ("Acme Corp", "organization"),
    ("billing-service", "service"), ("service-a", "service"), ("service-b", "service"), ("ripgrep", "tool"),
    ("Berlin", "location"), ("Q3 planning", "event"), ("design doc v2", "document"), ("platform team", "team"),
    ("payments api", "api"), ("orders db", "database"), ("requests", "library"), ("Widget Pro", "product"),
    ("BUG-1042", "bug"), ("cuba-memorys", "project"), ("PostgreSQL", "technology"),
    ("retry with backoff", "pattern"), ("idempotency", "concept"),
]
MCP_RELATIONS = [
    ("Ada Lovelace", "Acme Corp", "works_at"),
    ("Ada Lovelace", "Grace Hopper", "mentors"),  # two unknown types between one pair: one related_to
    ("Ada Lovelace", "Grace Hopper", "reports_to"),
    ("platform team", "service-a", "knows"),  # notes differing in one letter: near-duplicates, both kept
    ("platform team", "service-b", "knows"),
    ("platform team", "billing-service", "owns"),
    ("billing-service", "payments api", "uses"), ("billing-service", "orders db", "depends_on"),
    ("payments api", "idempotency", "implements"), ("requests", "BUG-1042", "causes"),
    ("orders db", "PostgreSQL", "related_to"),  # a native related_to and a foreign type on one pair
    ("orders db", "PostgreSQL", "runs_on"),
    ("cuba-memorys", "PostgreSQL", "uses"), ("ripgrep", "cuba-memorys", "related_to"),
    ("Acme Corp", "Widget Pro", "owns"), ("BUG-1042", "billing-service", "affects"),
    ("Q3 planning", "Berlin", "held_in"), ("design doc v2", "payments api", "describes"),
    ("retry with backoff", "billing-service", "used_by"),
]
MCP_FOREIGN_ENTITIES = 14  # of 12 foreign types (3 services); and "Person", ours but spelled otherwise
MCP_ROWS = len(MCP_RELATIONS) - 2  # mentors+reports_to and related_to+runs_on share a relation each
# 15 entity type notes; one per foreign relation line (12) and the related_to sharing a pair with runs_on
MCP_NOTES = MCP_FOREIGN_ENTITIES + 1 + 12 + 1


def mcp_file(folder: Path) -> Path:
    """The 20-entity memory.jsonl: varied entityTypes, ours and foreign, relations of both kinds."""
    lines = [{"type": "entity", "name": name, "entityType": kind,
              "observations": [f"{name} was first written down in entry {2 * n + 1}",
                               f"{name} had {n + 3} open questions in review round {n + 10}"]}
             for n, (name, kind) in enumerate(MCP_ENTITIES)]
    lines += [{"type": "relation", "from": a, "to": b, "relationType": kind} for a, b, kind in MCP_RELATIONS]
    path = folder / "memory.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def stored_state(mem: Memory) -> tuple[dict, dict, int]:
    """What an import may change: each relation's strength, each live observation (by id: entity,
    content, importance) and how many there are."""
    scope = mem.scope(None)
    strengths = {(r["from"], r["to"], r["type"]): r["strength"] for r in mem.store.offline_relations(scope)}
    rows = mem.store.offline_observations(scope)
    observations = {o["id"]: (o["entity"], o["content"], o["importance"]) for o in rows}
    return strengths, observations, len(rows)


def test_mcp_jsonl_export_gives_back_every_type_of_an_imported_file(settings, tmp_path: Path):
    # every row embedded before it is written (no queue): the near-duplicate merge sees the vectors
    mem = Memory.open(replace(settings, embed_queue=False))
    try:
        source = mcp_file(tmp_path)
        plan = mcp_jsonl.import_file(mem, None, path=str(source))
        assert plan["relations"] == len(MCP_RELATIONS) and plan["relation_rows"] == MCP_ROWS
        assert len(plan["mapped_entity_types"]) == 12 + 1
        assert sum(m["count"] for m in plan["mapped_entity_types"].values()) == MCP_FOREIGN_ENTITIES + 1
        assert plan["mapped_entity_types"]["organization"] == {"to": "concept", "count": 1}
        assert plan["mapped_entity_types"]["service"] == {"to": "concept", "count": 3}
        assert plan["mapped_entity_types"]["Person"] == {"to": "person", "count": 1}
        assert plan["mapped_relation_types"]["knows"] == {"to": "related_to", "count": 2}
        assert "related_to" not in plan["mapped_relation_types"] and "uses" not in plan["mapped_relation_types"]
        done = mcp_jsonl.import_file(mem, None, path=str(source), apply=True)
        assert plan["type_notes"] == MCP_NOTES
        assert done["written"]["relations"] == MCP_ROWS and done["written"]["type_notes"] == MCP_NOTES
        scope = mem.scope(None)
        types = {e["name"]: e["type"] for e in mem.store.offline_entities(scope)}
        assert types["Acme Corp"] == "concept" and types["Grace Hopper"] == "person"  # ours stays a closed set
        notes = {(o["entity"], o["content"]) for o in mem.store.offline_observations(scope) if o["type"] == "context"}
        assert {("Acme Corp", "mcp entity type: organization"),
                ("Ada Lovelace", "mcp relation: mentors → Grace Hopper"),
                ("Ada Lovelace", "mcp relation: reports_to → Grace Hopper"),
                ("platform team", "mcp relation: knows → service-a"),
                ("platform team", "mcp relation: knows → service-b")} <= notes
        out = tmp_path / "out.jsonl"
        written = mcp_jsonl.export(mem, None, path=str(out))
        assert written["entities"] == 20 and written["relations"] == len(MCP_RELATIONS)
        assert read_jsonl(out) == read_jsonl(source)  # types, observations (in order) and relations
    finally:
        mem.close()


def test_importing_the_same_mcp_file_twice_changes_nothing(memory: Memory, tmp_path: Path):
    source = mcp_file(tmp_path)
    first = mcp_jsonl.import_file(memory, None, path=str(source), apply=True)["written"]
    strengths, observations, rows = stored_state(memory)
    assert set(strengths.values()) == {0.5}  # two lines sharing a relation did not reinforce it either
    assert len(strengths) == MCP_ROWS and first["relations"] == MCP_ROWS
    assert rows == 40 + MCP_NOTES and first["observations"] == 40 and first["type_notes"] == MCP_NOTES
    second = mcp_jsonl.import_file(memory, None, path=str(source), apply=True)["written"]
    assert stored_state(memory) == (strengths, observations, rows)
    assert second == {"entities": 20, "observations": 0, "merged_or_skipped": 40, "relations": 0,
                      "relations_already_present": MCP_ROWS, "type_notes": 0,
                      "type_notes_already_stored": first["type_notes"]}
    out = tmp_path / "out.jsonl"
    mcp_jsonl.export(memory, None, path=str(out))
    assert read_jsonl(out) == read_jsonl(source)


def test_mcp_jsonl_import_and_export_say_what_they_do_on_the_command_line(location: StoreLocation, tmp_path: Path):
    source = mcp_file(tmp_path)
    plan = cli(location, "import", str(source), "--format", "mcp-jsonl").stdout
    assert f"20 entit(ies), 40 observation(s), {len(MCP_RELATIONS)} relation line(s)" in plan
    assert "Would write:" in plan and f"  {MCP_ROWS} relation(s) (those already stored" in plan
    assert "Entity types mapped:\n" in plan and "  organization → concept (1 entit(ies))\n" in plan
    assert "  service → concept (3 entit(ies))\n" in plan and "  Person → person (1 entit(ies))\n" in plan
    assert "Relation types mapped:\n" in plan and "  knows → related_to (2 line(s))\n" in plan
    assert "  mentors → related_to (1 line(s))\n" in plan and "  reports_to → related_to (1 line(s))\n" in plan
    assert "Nothing written: pass --apply to import." in plan and "{" not in plan
    done = cli(location, "import", str(source), "--format", "mcp-jsonl", "--apply").stdout
    assert "Written:\n" in done and "  40 observation(s) added, 0 already stored" in done
    assert f"  {MCP_ROWS} relation(s) created, 0 already stored" in done
    assert f"  {MCP_NOTES} type note(s) added, 0 already stored" in done
    assert "organization → concept (1 entit(ies))" in done and "{" not in done and "Nothing written" not in done
    again = cli(location, "import", str(source), "--format", "mcp-jsonl", "--apply").stdout
    assert "  0 observation(s) added, 40 already stored" in again
    assert f"  0 relation(s) created, {MCP_ROWS} already stored" in again
    assert f"  0 type note(s) added, {MCP_NOTES} already stored" in again
    out = tmp_path / "out.jsonl"
    said = cli(location, "export", str(out), "--format", "mcp-jsonl").stdout
    assert f"Wrote 20 entit(ies) and {len(MCP_RELATIONS)} relation(s)" in said and "original type(s)" in said
    assert read_jsonl(out) == read_jsonl(source)
