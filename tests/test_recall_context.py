"""Recall seeded by the change at hand (issue 19 §4; services/code/search.py): cuba_faro
``context`` {files, diff} boosts the memories anchored to the touched code (lines the diff
changes weigh more than the same file) and the errors of a test the change names, marks them
``from_context`` and counts them; `cuba-memorys recall --diff` reads `git diff HEAD`; bad
context is refused; and over the official MCP client, cuba_faro's rows carry ``freshness``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from code_repos import JOBS, jobs_repo
from cuba_memorys.code import repo as code_repo
from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import SearchFilter
from cuba_memorys.services import incidents
from cuba_memorys.services.code import anchors
from cuba_memorys.services.code import search as code_search
from cuba_memorys.services.observations import write
from cuba_memorys.services.search import faro
from cuba_memorys.services.sessions import recall
from mcp_helpers import run_stdio

CLI = Path(sys.executable).with_name("cuba-memorys")


@pytest.fixture
def repo(tmp_path):
    return jobs_repo(tmp_path / "repo")


@pytest.fixture
def mem(open_memory, repo):
    return open_memory(embed_model="none", code_root=repo.root)


@pytest.fixture(autouse=True)
def roomy_budget(monkeypatch):
    """A read-time budget no loaded test machine runs out of: these tests are about what a check
    finds (test_rows_past_the_time_budget_say_so is about the budget)."""
    monkeypatch.setattr(anchors.__name__ + ".BUDGET_SECONDS", 30.0)


def seed(mem):
    parse = write.add(mem, None, entity_name="config", content="parse_config silently drops unknown keys",
                      anchors=[{"path": "jobs.py", "symbol": "parse_config"}])["id"]
    retry = write.add(mem, None, entity_name="runner", content="the runner gives up after three attempts",
                      anchors=[{"path": "jobs.py", "symbol": "retry"}])["id"]
    other = write.add(mem, None, entity_name="deploy", content="deploys happen on fridays at noon")["id"]
    return parse, retry, other


def test_context_files_bring_the_anchored_memories_the_query_did_not_find(mem, repo):
    parse, retry, other = seed(mem)
    plain = faro.faro(mem, None, query="deploys fridays", scope="observations")
    assert [r["id"] for r in plain["results"]] == [other] and "context_matches" not in plain
    seeded = faro.faro(mem, None, query="deploys fridays", scope="observations", context={"files": ["./jobs.py"]})
    ids = [r["id"] for r in seeded["results"]]
    assert set(ids) == {parse, retry, other} and seeded["context_matches"] == 2
    assert all(r.get("from_context") for r in seeded["results"] if r["id"] != other)
    assert "from_context" not in next(r for r in seeded["results"] if r["id"] == other)
    assert all(r["freshness"] == "fresh" for r in seeded["results"] if r["id"] != other)


def test_a_diff_over_a_symbols_lines_weighs_more_than_the_same_file(mem, repo):
    parse, retry, _ = seed(mem)
    repo.write("jobs.py", JOBS.replace("return False", "return None"))  # inside retry only
    diff = code_repo.working_diff(repo.root)
    seeded = faro.faro(mem, None, query="deploys fridays", scope="observations", context={"diff": diff})
    ids = [r["id"] for r in seeded["results"]]
    assert ids.index(retry) < ids.index(parse)
    assert seeded["context_matches"] == 2
    stale = next(r for r in seeded["results"] if r["id"] == retry)
    assert stale["freshness"] == "changed"  # boosted by the context, and still flagged


def test_errors_of_a_failing_test_the_change_names_are_boosted(mem, repo):
    error = incidents.report(mem, None, error_type="AssertionError",
                          error_message="test_parse_keeps_unknown_keys failed: {'a': '1'} != {'a': '1', 'z': '2'}")
    repo.write("tests/test_jobs.py", "def test_parse_keeps_unknown_keys():\n    assert True\n")
    diff = code_repo.working_diff(repo.root) + subprocess.run(
        ["git", "diff", "--no-index", "/dev/null", "tests/test_jobs.py"], cwd=repo.root, capture_output=True,
        text=True).stdout
    seeded = faro.faro(mem, None, query="deploys fridays", context={"diff": diff})
    row = next(r for r in seeded["results"] if r["id"] == error["error_id"])
    assert row["from_context"] is True and seeded["context_matches"] >= 1
    only_observations = faro.faro(mem, None, query="deploys fridays", scope="observations", context={"diff": diff})
    assert error["error_id"] not in {r["id"] for r in only_observations["results"]}  # the scope still holds


@pytest.mark.parametrize("context, says", [
    ("jobs.py", "must be an object"),
    ({}, "names no files and has no diff"),
    ({"files": "jobs.py"}, "must be an array of strings"),
    ({"diff": 3}, "must be a string"),
    ({"paths": ["jobs.py"]}, "is not a context field"),
])
def test_bad_context_is_refused(mem, repo, context, says):
    with pytest.raises(InvalidInput, match=says):
        faro.faro(mem, None, query="x", context=context)


def test_recall_with_the_working_diff(mem, repo):
    parse, retry, _ = seed(mem)
    repo.write("jobs.py", JOBS.replace("return False", "return None"))
    data = recall.recall(mem, None, diff=code_repo.working_diff(repo.root))
    rows = data["code_memories"]
    assert [r["id"] for r in rows] == [retry, parse]  # lines touched first, then the same file
    assert rows[0]["freshness"] == "changed" and rows[0]["stale"] is True
    assert "About the code you are changing" in data["text"] and "[changed] runner" in data["text"]
    assert "code_memories" not in recall.recall(mem, None)


def test_recall_diff_on_the_command_line(location, repo):
    env = location.env(CUBA_EMBED_MODEL="none", CUBA_CODE_ROOT=str(repo.root))
    saved = subprocess.run([str(CLI), "save", "runner", "the runner gives up after three attempts", "--anchor",
                            "jobs.py:retry", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert saved.returncode == 0, saved.stderr
    repo.write("jobs.py", JOBS.replace("return False", "return None"))
    done = subprocess.run([str(CLI), "recall", "--diff", "--json"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["code_memories"][0]["id"] == json.loads(saved.stdout)["id"]
    outside = subprocess.run([str(CLI), "recall", "--diff"], env={**env, "CUBA_CODE_ROOT": str(repo.root.parent)},
                             cwd=repo.root.parent, capture_output=True, text=True, timeout=120)
    # outside a repository: the plain recall and a one-line note, never a failing session-start hook
    assert outside.returncode == 0, outside.stderr
    assert outside.stdout.rstrip().splitlines()[-1].startswith("(--diff: no git repository here")


def test_freshness_over_the_official_mcp_client(location, repo):
    async def body(agent):
        added = await agent.call("cuba_cronica", action="add", entity_name="config",
                                 content="parse_config silently drops unknown keys",
                                 anchors=[{"path": "jobs.py", "symbol": "parse_config", "lines": "4-10"}])
        fresh = await agent.call("cuba_faro", query="parse_config unknown keys")
        repo.write("jobs.py", JOBS.replace("Read key=value lines.", "Read lines, keep only known keys."))
        stale = await agent.call("cuba_faro", query="parse_config unknown keys", context={"files": ["jobs.py"]})
        refused = await agent.error("cuba_cronica", action="add", entity_name="config", content="x",
                                    anchors=[{"path": "../../etc/passwd"}])
        return added, fresh, stale, refused

    added, fresh, stale, refused = run_stdio(location, body, CUBA_EMBED_MODEL="none", CUBA_CODE_ROOT=str(repo.root))
    assert added["anchors"][0]["symbol"] == "parse_config"
    assert fresh["results"][0]["freshness"] == "fresh"
    assert fresh["results"][0]["anchors"] == [{"path": "jobs.py", "symbol": "parse_config", "lines": [4, 10],
                                                "status": "fresh"}]
    row = stale["results"][0]
    assert row["freshness"] == "changed" and row["stale"] is True and row["from_context"] is True
    assert stale["context_matches"] == 1
    assert "anchors[0].path" in refused and "climbs out" in refused


def test_context_finds_only_the_anchors_of_the_callers_project(mem, repo):
    from cuba_memorys.services.graph import projects

    projects.switch(mem, "a", name="shop")
    mine = write.add(mem, "a", entity_name="config", content="parse_config drops unknown keys in the shop",
                     anchors=[{"path": "jobs.py", "symbol": "parse_config"}])["id"]
    projects.switch(mem, "b", name="blog")
    theirs = write.add(mem, "b", entity_name="config", content="parse_config is strict in the blog",
                       anchors=[{"path": "jobs.py", "symbol": "parse_config"}])["id"]
    seen = faro.faro(mem, "b", query="deploys", context={"files": ["jobs.py"]})
    ids = {r["id"] for r in seen["results"]}
    assert theirs in ids and mine not in ids and seen["context_matches"] == 1


def test_the_overlap_is_taken_with_where_the_symbol_is_now_not_its_stored_lines(mem, repo):
    parse, retry, _ = seed(mem)
    stored = mem.store.anchors_of([retry])[retry][0]
    header = "".join(f"# line {n}\n" for n in range(30))
    repo.write("jobs.py", header + JOBS)
    repo.commit("a header: every function 30 lines lower")  # the stored anchors are not re-read yet
    repo.write("jobs.py", header + JOBS.replace("return False", "return None"))  # inside retry only
    ctx = code_search.from_change(mem, [], code_repo.working_diff(repo.root))
    (changed,) = ctx.spans["jobs.py"]
    assert changed[0] > stored["line_end"]  # the diff's lines miss the stored ones
    weights = code_search.matches(mem, ctx, SearchFilter(scope=mem.scope(None)))
    assert weights[("observation", retry)] == code_search.SPAN_OVERLAP
    assert weights[("observation", parse)] == code_search.SAME_FILE
