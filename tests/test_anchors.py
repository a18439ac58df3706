"""Writing anchors (issue 19 §2; services/code/anchors.py, storage/sql/anchors.py) on both
backends against real git repositories: what an anchor stores, cuba_cronica add / batch_add and
cuba_ingesta with anchors, the refusals (outside the repository, `..`, a symlink out, a binary
file, an unknown symbol, lines past the end, no repository), proposals, delete and undo, cuba_eco
correct re-anchoring at HEAD, the consolidation cycle's re-check, and the CLI: `save --anchor`,
`anchors check [--json] [--record] [--quiet]`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from code_repos import JOBS, jobs_repo
from cuba_memorys.code import spans
from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import SearchFilter
from cuba_memorys.search.tokens import row_tokens
from cuba_memorys.services.code import anchors, check
from cuba_memorys.services.lifecycle import feedback, forget, rem, undo
from cuba_memorys.services.observations import ingest, write
from cuba_memorys.services.search import faro

CLI = Path(sys.executable).with_name("cuba-memorys")


@pytest.fixture
def repo(tmp_path):
    return jobs_repo(tmp_path / "repo")


@pytest.fixture
def mem(open_memory, repo):
    return open_memory(embed_model="none", code_root=repo.root)


def test_an_anchor_stores_the_commit_the_symbols_span_and_its_hash(mem, repo):
    answer = write.add(mem, None, entity_name="jobs", content="parse_config silently drops unknown keys",
                       anchors=[{"path": "jobs.py", "symbol": "parse_config"},
                                {"path": "./README.md"}, {"path": "jobs.py", "lines": [13, 17]}])
    assert answer["anchors"][0] == {"path": "jobs.py", "symbol": "parse_config", "lines": [4, 10],
                                    "commit": repo.head()}
    stored = mem.store.anchors_of([answer["id"]])[answer["id"]]
    assert [(a["path"], a["symbol"], a["line_start"], a["line_end"]) for a in stored] == [
        ("README.md", None, 1, 1), ("jobs.py", "parse_config", 4, 10), ("jobs.py", None, 13, 17)]
    assert stored[1]["span_hash"] == spans.span_hash(spans.lines_of(JOBS, 4, 10))
    assert stored[0]["repo_root"] == str(repo.root.resolve()) and stored[0]["commit_sha"] == repo.head()


def test_a_method_is_named_by_its_class(mem, repo):
    repo.write("store.py", "class Store:\n    def save(self):\n        return 1\n")
    answer = write.add(mem, None, entity_name="store", content="Store.save returns one",
                       anchors=[{"path": "store.py", "symbol": "Store.save"}])
    assert answer["anchors"][0]["symbol"] == "Store::save" and answer["anchors"][0]["lines"] == [2, 3]


@pytest.mark.parametrize("anchor, param, says", [
    ({"path": "../outside.py"}, "anchors[0].path", "climbs out"),
    ({"path": "/etc/hostname"}, "anchors[0].path", "outside the repository"),
    ({"path": "link/secret.py"}, "anchors[0].path", "symlink"),
    ({"path": "logo.png"}, "anchors[0].path", "binary"),
    ({"path": "nowhere.py"}, "anchors[0].path", "is not a file"),
    ({"path": "jobs.py", "symbol": "parse"}, "anchors[0].symbol", "parse_config, retry"),
    ({"path": "README.md", "symbol": "x"}, "anchors[0].symbol", "give lines instead"),
    ({"path": "jobs.py", "lines": "10-99"}, "anchors[0].lines", "has 17 lines"),
    ({"path": "jobs.py", "lines": "9-3"}, "anchors[0].lines", "at most the last"),
    ({"path": "jobs.py", "lines": "a-b"}, "anchors[0].lines", "not a line range"),
    ({"path": "jobs.py", "line": 3}, "anchors[0].line", "not an anchor field"),
    ("jobs.py", "anchors[0]", "must be an object"),
])
def test_bad_anchors_are_refused_and_nothing_is_written(mem, repo, tmp_path, anchor, param, says):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.py").write_text("x = 1\n")
    (repo.root / "link").symlink_to(outside)
    (repo.root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(InvalidInput) as refused:
        write.add(mem, None, entity_name="jobs", content="a memory about code", anchors=[anchor])
    assert str(refused.value).startswith(param) and says in str(refused.value)
    assert mem.store.get_entity("jobs", mem.scope(None)) is None  # nothing written


def test_without_a_repository_an_anchor_is_a_clear_error(open_memory, tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    mem = open_memory(embed_model="none", code_root=None)
    with pytest.raises(InvalidInput, match="no git repository to anchor to .*CUBA_CODE_ROOT"):
        write.add(mem, None, entity_name="jobs", content="x", anchors=[{"path": "jobs.py"}])


def test_batch_add_checks_every_anchor_before_writing_any(mem, repo):
    good = {"entity_name": "jobs", "content": "retry tries three times", "anchors": [{"path": "jobs.py",
                                                                                     "symbol": "retry"}]}
    bad = {"entity_name": "jobs", "content": "another", "anchors": [{"path": "../x.py"}]}
    with pytest.raises(InvalidInput, match=r"observations\[1\]\.anchors\[0\]\.path"):
        write.batch_add(mem, None, [good, bad])
    assert mem.store.get_entity("jobs", mem.scope(None)) is None
    answer = write.batch_add(mem, None, [good, {"entity_name": "jobs", "content": "plain fact, no code"}])
    assert answer["anchors_stored"] == 1
    assert list(mem.store.anchors_of(answer["ids"])) == [answer["ids"][0]]


def test_ingest_reports_an_item_with_a_bad_anchor_and_stores_the_others(mem, repo):
    answer = ingest.ingest(mem, None, items=[
        {"entity_name": "jobs", "content": "retry gives up after three", "anchors": [{"path": "jobs.py",
                                                                                    "symbol": "retry"}]},
        {"entity_name": "jobs", "content": "bad one", "anchors": [{"path": "jobs.py", "symbol": "nope"}]}])
    assert answer["added"] == 1 and answer["invalid"][0]["index"] == 1
    assert "items[1].anchors[0].symbol" in answer["invalid"][0]["reason"]
    assert mem.store.anchors_of([answer["ids"][0]])[answer["ids"][0]][0]["symbol"] == "retry"


def test_a_duplicate_write_anchors_the_row_it_already_has(mem, repo):
    first = write.add(mem, None, entity_name="jobs", content="retry gives up after three tries")
    again = write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
                      anchors=[{"path": "jobs.py", "symbol": "retry"}])
    assert again["deduplicated"] is True and again["id"] == first["id"]
    write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
              anchors=[{"path": "jobs.py", "symbol": "retry"}])
    assert len(mem.store.anchors_of([first["id"]])[first["id"]]) == 1  # not stored twice


def test_content_naming_a_file_or_a_codegraph_symbol_gets_proposals_not_anchors(mem, repo):
    answer = write.add(mem, None, entity_name="jobs", content="jobs.py and docs/none.md: the retry loop is fine")
    assert answer["proposed_anchors"] == [{"path": "jobs.py"}]
    assert mem.store.anchors_of([answer["id"]]) == {}
    mem.store.create_entity("jobs.py::retry", "code_symbol", None)
    named = write.add(mem, None, entity_name="jobs", content="`jobs.py::retry` must stay idempotent")
    assert {"path": "jobs.py", "symbol": "retry"} in named["proposed_anchors"]
    plain = write.add(mem, None, entity_name="ops", content="we deploy on fridays")
    assert "proposed_anchors" not in plain


def test_delete_takes_the_anchors_and_undo_brings_them_back(mem, repo):
    obs_id = write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
                       anchors=[{"path": "jobs.py", "symbol": "retry"}])["id"]
    deleted = write.delete(mem, None, observation_id=obs_id)
    assert mem.store.anchors_of([obs_id]) == {}
    undo.apply(mem, deleted["undo_file"])
    assert mem.store.anchors_of([obs_id])[obs_id][0]["symbol"] == "retry"


def test_forgetting_the_entity_takes_its_anchors(mem, repo):
    obs_id = write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
                       anchors=[{"path": "jobs.py", "symbol": "retry"}])["id"]
    forget.forget(mem, None, entity_name="jobs", confirm=True)
    assert mem.store.anchors_of([obs_id]) == {}
    assert mem.store.anchors_in_scope(mem.scope(None), 10) == []


def test_correct_re_anchors_a_stale_row_at_head_audited(mem, repo):
    obs_id = write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
                       anchors=[{"path": "jobs.py", "symbol": "retry"}])["id"]
    repo.write("jobs.py", JOBS.replace("times=3", "times=5"))
    head = repo.commit("retry five times")
    answer = feedback.correct(mem, None, observation_id=obs_id, correction="retry gives up after five tries")
    (change,) = answer["reanchored"]
    assert change["from"]["commit"] != head and change["to"] == {"path": "jobs.py", "lines": [13, 17],
                                                                 "commit": head}
    stored = mem.store.anchors_of([obs_id])[obs_id][0]
    assert stored["commit_sha"] == head
    assert stored["span_hash"] == spans.span_hash(spans.lines_of(JOBS.replace("times=3", "times=5"), 13, 17))
    event = json.loads(next(r for r in mem.store.audit_rows(0, 100) if r["id"] == answer["audit_id"])["payload"])
    assert event["reanchored"][0]["anchor_id"] == change["anchor_id"]
    plain = write.add(mem, None, entity_name="ops", content="we deploy on fridays")["id"]
    assert "reanchored" not in feedback.correct(mem, None, observation_id=plain, correction="we deploy on mondays")


def test_the_consolidation_cycle_re_checks_and_records_the_anchors(mem, repo):
    obs_id = write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
                       anchors=[{"path": "jobs.py", "symbol": "retry"}])["id"]
    repo.write("jobs.py", JOBS.replace("return False", "return None"))
    cycle = rem.run_cycle(mem, trigger="test")
    assert cycle["error"] is None and cycle["anchors_checked"] == 1 and cycle["anchors_stale"] == 1
    assert mem.store.anchors_of([obs_id])[obs_id][0]["status"] == "changed"


# -- the command line --------------------------------------------------------------------------
def run(where, repo, *args: str) -> subprocess.CompletedProcess[str]:
    env = where.env(CUBA_EMBED_MODEL="none", CUBA_CODE_ROOT=str(repo.root))
    env.update({k: v for k, v in repo.env.items() if k.startswith("GIT_")})
    return subprocess.run([str(CLI), *args], cwd=repo.root, env=env, capture_output=True, text=True, timeout=120)


def test_save_anchor_and_anchors_check(location, repo):
    saved = run(location, repo, "save", "jobs", "parse_config drops unknown keys", "--anchor", "jobs.py:parse_config",
                "--anchor", "jobs.py:13-17", "--json")
    assert saved.returncode == 0, saved.stderr
    answer = json.loads(saved.stdout)
    assert [(a["symbol"], a["lines"]) for a in answer["anchors"]] == [("parse_config", [4, 10]), (None, [13, 17])]
    quiet = run(location, repo, "anchors", "check", "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == ""
    repo.write("jobs.py", JOBS.replace("    keys = {}\n", "    keys = {'strict': True}\n"))
    edit = repo.commit("strict by default")
    report = run(location, repo, "anchors", "check", "--json", "--record")
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["checked"] == 2 and data["counts"]["changed"] == 1 and data["counts"]["fresh"] == 1
    (stale,) = data["stale"]
    assert stale["observation_id"] == answer["id"] and stale["changed_since"] == edit and data["recorded"]
    assert "-    keys = {}" in stale["diff"] and "+    keys = {'strict': True}" in stale["diff"]
    text = run(location, repo, "anchors", "check")
    assert "[changed since" in text.stdout and "parse_config drops unknown keys" in text.stdout
    search = run(location, repo, "search", "parse_config unknown keys")
    assert "[changed: its code changed]" in search.stdout


def test_save_anchor_outside_the_repository_fails_with_status_2(location, repo):
    done = run(location, repo, "save", "jobs", "x", "--anchor", "../../etc/passwd")
    assert done.returncode == 2 and "climbs out" in done.stderr and "Traceback" not in done.stderr
    assert os.path.exists(repo.root / "jobs.py")


# -- review findings (issue 19) -----------------------------------------------------------------
def test_a_deeply_nested_file_is_anchored_and_searched_without_recursion_error(mem, repo):
    """A 3000-term sum makes a tree 3000 deep: the symbol walk must not recurse (finding 6)."""
    deep = ("def before():\n    return 1\n\n\nX = " + "+".join(["1"] * 3000) + "\n\n\n"
            "def after():\n    return [" + "[" * 500 + "0" + "]" * 500 + "]\n")
    repo.write("deep.py", deep)
    repo.commit("a deep file")
    answer = write.add(mem, None, entity_name="deep", content="after returns a deeply nested list",
                       anchors=[{"path": "deep.py", "symbol": "after"}])
    assert answer["anchors"][0]["symbol"] == "after" and answer["anchors"][0]["lines"] == [8, 9]
    found = faro.faro(mem, None, query="deeply nested list", scope="observations")
    row = next(r for r in found["results"] if r["id"] == answer["id"])
    assert row["freshness"] == "fresh"


@pytest.mark.parametrize("path", [".git/config", ".git/HEAD", "./.git/hooks/pre-commit.sample", ".GIT/config"])
def test_git_s_own_folder_cannot_be_anchored(mem, repo, path):
    with pytest.raises(InvalidInput) as refused:
        write.add(mem, None, entity_name="jobs", content="a memory about git config", anchors=[{"path": path}])
    assert str(refused.value).startswith("anchors[0].path") and "git's own folder" in str(refused.value)
    assert mem.store.get_entity("jobs", mem.scope(None)) is None
    (repo.root / ".git" / "notes.txt").write_text("not code\n")
    proposed = write.add(mem, None, entity_name="ops", content="see .git/notes.txt and jobs.py for the remote")
    assert proposed["proposed_anchors"] == [{"path": "jobs.py"}]


def test_anchors_on_paths_keeps_to_the_repository_and_the_filter(mem, repo, tmp_path):
    """Finding 10, in the store: an anchor of another repository on the same relative path is
    not the change's; with the search's filter, only rows it admits (tags are a constraint)."""
    obs_id = write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
                       anchors=[{"path": "jobs.py", "symbol": "retry"}])["id"]
    scope, root = mem.scope(None), str(repo.root.resolve())

    def found(**kw) -> list[str]:
        return [a["observation_id"] for a in mem.store.anchors_on_paths(["jobs.py"], scope, 10, **kw)]

    assert found() == [obs_id]  # the old call: path and scope only
    assert found(repo_root=root) == [obs_id]
    assert found(repo_root=str(tmp_path / "other")) == []
    assert found(repo_root=root, flt=SearchFilter(scope=scope)) == [obs_id]
    assert found(flt=SearchFilter(scope=scope, tags=("retry",))) == [obs_id]
    assert found(flt=SearchFilter(scope=scope, tags=("nothing",))) == []
    assert found(flt=SearchFilter(scope=scope, any_tags=("nothing",))) == []
    assert found(flt=SearchFilter(scope=scope, before="2000-01-01T00:00:00Z")) == []
    assert found(flt=SearchFilter(scope=scope, after="2999-01-01T00:00:00Z")) == []
    assert found(flt=SearchFilter(scope=scope, as_of="2000-01-01T00:00:00Z")) == []
    assert found(flt=SearchFilter(scope=scope, observation_types=("decision",))) == []
    write.delete(mem, None, observation_id=obs_id)
    assert found(flt=SearchFilter(scope=scope)) == []


def test_a_context_from_another_repository_does_not_bring_this_one_s_memory(open_memory, tmp_path):
    """Finding 10 end to end: the same relative path in repository B is not repository A's file;
    and the request's tags and time window apply to the rows the context brings."""
    first, second = jobs_repo(tmp_path / "a"), jobs_repo(tmp_path / "b")
    in_a = open_memory(embed_model="none", code_root=first.root)
    anchored = write.add(in_a, None, entity_name="jobs", content="retry gives up after three tries",
                         anchors=[{"path": "jobs.py", "symbol": "retry"}])["id"]
    in_b = open_memory(embed_model="none", code_root=second.root)
    from_b = faro.faro(in_b, None, query="zebra unrelated", scope="observations", context={"files": ["jobs.py"]})
    assert [r["id"] for r in from_b["results"]] == [] and from_b["context_matches"] == 0
    from_a = faro.faro(in_a, None, query="zebra unrelated", scope="observations", context={"files": ["jobs.py"]})
    assert [r["id"] for r in from_a["results"]] == [anchored] and from_a["context_matches"] == 1
    for narrowing in ({"tags": "nonexistent"}, {"before": "2000-01-01T00:00:00Z"},
                      {"after": "2999-01-01T00:00:00Z"}, {"as_of": "2000-01-01T00:00:00Z"}):
        narrowed = faro.faro(in_a, None, query="zebra unrelated", scope="observations",
                             context={"files": ["jobs.py"]}, **narrowing)
        assert narrowed["results"] == [] and narrowed["context_matches"] == 0, narrowing
    tagged = faro.faro(in_a, None, query="zebra unrelated", scope="observations", tags="retry",
                       context={"files": ["jobs.py"]})
    assert [r["id"] for r in tagged["results"]] == [anchored]


def test_freshness_fields_count_against_max_tokens(mem, repo, monkeypatch):
    """Finding 15: the anchors and freshness added to anchored rows are inside the budget."""
    # a loaded machine must not run out of the read-time check's 20 ms: rows past it carry a longer
    # "not checked" detail, and this test is about the token budget, not the time one
    monkeypatch.setattr(anchors.__name__ + ".BUDGET_SECONDS", 30.0)
    both = [{"path": "jobs.py", "symbol": "retry"}, {"path": "jobs.py", "symbol": "parse_config"}]
    ids = [write.add(mem, None, entity_name="jobs", content=f"retry note {n}: the loop gives up after three tries",
                     anchors=both)["id"] for n in range(6)]
    whole = faro.faro(mem, None, query="retry loop gives up", scope="observations", max_tokens=100_000)
    assert {r["id"] for r in whole["results"]} == set(ids) and all("freshness" in r for r in whole["results"])
    for budget in (150, 300, 600):
        cut = faro.faro(mem, None, query="retry loop gives up", scope="observations", max_tokens=budget)
        assert cut["results"], budget
        assert sum(row_tokens(r) for r in cut["results"]) <= budget, budget
        assert len(cut["results"]) < len(ids)


def test_an_anchor_stored_into_git_s_folder_before_the_check_is_unverifiable_never_read(mem, repo):
    """An anchor written before .git was refused (moved there directly in the store): reads call
    it unverifiable and `anchors check` shows no text of git's config."""
    obs_id = write.add(mem, None, entity_name="jobs", content="retry gives up after three tries",
                       anchors=[{"path": "jobs.py", "lines": [1, 2]}])["id"]
    (stored,) = mem.store.anchors_of([obs_id])[obs_id]
    (repo.root / ".git" / "config").write_text((repo.root / ".git" / "config").read_text() + "# secret-ish\n")
    assert mem.store.move_anchor(stored["id"], {"path": ".git/config", "line_start": 1, "line_end": 3})
    found = faro.faro(mem, None, query="retry gives up", scope="observations")
    row = next(r for r in found["results"] if r["id"] == obs_id)
    assert row["freshness"] == "unverifiable"
    report = check.check_all(mem, None)
    assert report["counts"]["unverifiable"] == 1 and report["stale"] == []
    assert "secret-ish" not in json.dumps(report) and "[core]" not in json.dumps(report)


def test_context_matches_counts_only_the_rows_served_within_max_tokens(mem, repo):
    for n in range(5):
        write.add(mem, None, entity_name="jobs", content=f"retry caveat {n}: the loop gives up after three tries",
                  anchors=[{"path": "jobs.py", "symbol": "retry"}])
    whole = faro.faro(mem, None, query="zebra unrelated", scope="observations", context={"files": ["jobs.py"]})
    assert whole["context_matches"] == 5 == len(whole["results"])
    cut = faro.faro(mem, None, query="zebra unrelated", scope="observations", context={"files": ["jobs.py"]},
                    max_tokens=150)
    assert 1 <= len(cut["results"]) < 5 and sum(row_tokens(r) for r in cut["results"]) <= 150
    assert cut["context_matches"] == len(cut["results"])
