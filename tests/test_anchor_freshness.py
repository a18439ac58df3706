"""Freshness at read time (issue 19 §3; services/code/anchors.py, code/freshness.py), on both
backends, against real git repositories: an edit (committed and not), a function moved within its
file, a file renamed with `git mv`, a symbol and a file deleted, a rebase that rewrote the
anchored commit, a vanished repository, the time budget; stale rows ranked lower in cuba_faro
and flagged, never dropped; search_hipocampo, cuba_alma get and the entity resource carry it."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from code_repos import JOBS, jobs_repo
from cuba_memorys.services import resources
from cuba_memorys.services.code import anchors
from cuba_memorys.services.graph import entities
from cuba_memorys.services.observations import write
from cuba_memorys.services.search import faro, hipocampo


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


def remember(mem, content="parse_config silently drops unknown keys", symbol="parse_config", entity="jobs"):
    anchor = {"path": "jobs.py", **({"symbol": symbol} if symbol else {"lines": "4-10"})}
    return write.add(mem, None, entity_name=entity, content=content, anchors=[anchor])["id"]


def freshness(mem, obs_id):
    found = anchors.annotate(mem, None, [obs_id])[obs_id]
    mem.settle()  # a moved anchor is re-anchored after the answer
    return found


def test_a_fresh_anchor_and_one_whose_symbol_was_edited(mem, repo):
    obs_id = remember(mem)
    assert freshness(mem, obs_id)["freshness"] == "fresh"
    assert "stale" not in freshness(mem, obs_id)
    repo.write("jobs.py", JOBS.replace('keys[name.strip()] = value.strip()',
                                       'if name in ("a", "b"):\n            keys[name] = value'))
    uncommitted = freshness(mem, obs_id)
    assert uncommitted["freshness"] == "changed" and uncommitted["stale"] is True
    assert "changed_since" not in uncommitted["anchors"][0]  # nothing committed changed it yet
    edit = repo.commit("parse_config: only a and b")
    committed = freshness(mem, obs_id)["anchors"][0]
    assert committed["status"] == "changed" and committed["changed_since"] == edit
    assert committed["symbol"] == "parse_config"


def test_a_function_moved_within_its_file_is_followed_and_the_move_audited(mem, repo):
    obs_id = remember(mem)
    repo.write("jobs.py", JOBS.replace("import os\n", "import os\nimport sys\n\nLIMIT = 3\n"))
    repo.commit("constants first")
    found = freshness(mem, obs_id)
    assert found["freshness"] == "moved" and found["anchors"][0]["lines"] == [7, 13]
    stored = mem.store.anchors_of([obs_id])[obs_id][0]
    assert (stored["line_start"], stored["line_end"], stored["commit_sha"]) == (7, 13, repo.head())
    events = [json.loads(r["payload"]) for r in mem.store.audit_rows(0, 100) if r["action"] == "memory.reanchor"]
    assert events and events[-1]["from"]["lines"] == [4, 10] and events[-1]["to"]["lines"] == [7, 13]
    assert freshness(mem, obs_id)["freshness"] == "fresh"  # the anchor now is where the code is


def test_lines_without_a_symbol_moved_and_changed(mem, repo):
    obs_id = remember(mem, symbol=None)
    repo.write("jobs.py", "# header\n" + JOBS)
    assert freshness(mem, obs_id)["anchors"][0] == {
        "path": "jobs.py", "symbol": None, "lines": [5, 11], "status": "moved",
        "detail": "the same text is now at lines 5-11"}
    repo.write("jobs.py", "# header\n" + JOBS.replace("Read key=value lines.", "Read lines."))
    assert freshness(mem, obs_id)["freshness"] == "changed"


def test_a_renamed_file_is_followed(mem, repo):
    obs_id = remember(mem)
    repo.git("mv", "jobs.py", "config_jobs.py")
    repo.commit("rename")
    found = freshness(mem, obs_id)
    assert found["freshness"] == "moved" and found["anchors"][0]["path"] == "config_jobs.py"
    assert mem.store.anchors_of([obs_id])[obs_id][0]["path"] == "config_jobs.py"


def test_a_deleted_symbol_and_a_deleted_file_are_missing(mem, repo):
    obs_id = remember(mem)
    retry = remember(mem, "retry gives up after three tries", symbol="retry", entity="retry")
    repo.write("jobs.py", JOBS[JOBS.index("def retry"):])
    repo.commit("parse_config moved out")
    found = freshness(mem, obs_id)
    assert found["freshness"] == "missing" and found["stale"] is True
    assert "no longer defined" in found["anchors"][0]["detail"]
    assert freshness(mem, retry)["freshness"] == "moved"
    (repo.root / "jobs.py").unlink()
    assert freshness(mem, retry)["freshness"] == "missing"


def test_a_rebase_that_rewrote_the_anchored_commit(mem, repo):
    repo.write("jobs.py", JOBS + "\n\ndef cleanup():\n    return None\n")
    anchored = repo.commit("cleanup")
    obs_id = write.add(mem, None, entity_name="jobs", content="cleanup does nothing yet",
                       anchors=[{"path": "jobs.py", "symbol": "cleanup"}])["id"]
    repo.git("checkout", "-q", "-b", "side", f"{anchored}~1")
    repo.write("NOTES.md", "notes\n")
    repo.commit("notes")
    repo.git("checkout", "-q", "main")
    repo.git("rebase", "-q", "side")
    assert repo.head() != anchored  # the anchored commit is no longer on the branch
    assert freshness(mem, obs_id)["freshness"] == "fresh"  # same text: still true
    repo.write("jobs.py", JOBS + "\n\ndef cleanup():\n    return 1\n")
    changed = repo.commit("cleanup returns 1")
    found = freshness(mem, obs_id)["anchors"][0]
    # the rebased copy of the anchored commit did not change the text: the later commit did
    assert found["status"] == "changed" and found["changed_since"] == changed
    assert "not in the history" in found["detail"]


def test_a_vanished_repository_is_unverifiable_and_the_row_still_found(mem, repo):
    obs_id = remember(mem)
    shutil.rmtree(repo.root)
    found = freshness(mem, obs_id)
    assert found["freshness"] == "unverifiable" and "stale" not in found
    results = faro.faro(mem, None, query="parse_config unknown keys")["results"]
    assert [r["id"] for r in results] == [obs_id] and results[0]["freshness"] == "unverifiable"


def test_rows_past_the_time_budget_say_so(mem, repo, monkeypatch):
    obs_id = remember(mem)
    monkeypatch.setattr(anchors, "BUDGET_SECONDS", -1.0)
    found = freshness(mem, obs_id)  # settles: the row left out is checked after the answer
    assert found["freshness"] == "unverifiable"
    assert found["anchors"][0]["detail"] == "not checked: time budget"
    assert freshness(mem, obs_id)["freshness"] == "fresh"  # past the budget, the cache still answers
    repo.write("jobs.py", JOBS.replace("Read key=value lines.", "Read lines."))
    assert freshness(mem, obs_id)["freshness"] == "unverifiable"  # the file changed: not from the cache
    assert freshness(mem, obs_id)["freshness"] == "changed"


def test_a_stale_row_ranks_lower_and_is_flagged_never_dropped(mem, repo):
    # different wordings (the search folds near-identical rows into one), the same query words
    first = remember(mem, "retry loop idempotent: callers resend orders", symbol="parse_config", entity="alpha")
    second = remember(mem, "retry loop idempotent: workers replay payments", symbol="retry", entity="beta")
    unanchored = write.add(mem, None, entity_name="gamma", content="idempotent webhook retry loop, said ops")["id"]
    before = faro.faro(mem, None, query="retry loop idempotent")["results"]
    assert {r["id"] for r in before} == {first, second, unanchored}
    plain = next(r for r in before if r["id"] == unanchored)
    assert not {"freshness", "anchors", "stale"} & set(plain)  # rows without anchors carry nothing new
    leader = next(r["id"] for r in before if r["id"] != unanchored)
    edit = ("Read key=value lines.", "Read lines.") if leader == first else ("return False", "return None")
    repo.write("jobs.py", JOBS.replace(*edit))
    after = faro.faro(mem, None, query="retry loop idempotent")["results"]
    stale = next(r for r in after if r["id"] == leader)
    assert stale["stale"] is True and stale["freshness"] == "changed"
    assert len(after) == len(before)  # flagged, never dropped
    ids_before, ids_after = [r["id"] for r in before], [r["id"] for r in after]
    assert ids_after.index(leader) > ids_before.index(leader)  # the close runner-up now leads it
    was = next(r for r in before if r["id"] == leader)["s"]
    assert stale["s"] == pytest.approx(was * anchors.STALE_FACTOR["changed"], abs=1e-6)
    assert [r["s"] for r in after] == sorted((r["s"] for r in after), reverse=True)  # ranked by the lowered score
    others = {r["id"]: r["s"] for r in before if r["id"] != leader}
    assert [r["id"] for r in after] == sorted({**others, leader: stale["s"]}, key=lambda i: -{**others, leader:
                                                                                             stale["s"]}[i])
    verbose = faro.faro(mem, None, query="retry loop idempotent", format="verbose")["results"]
    row = next(r for r in verbose if r["id"] == leader)
    assert row["stale"] is True and row["score"] == row["fused_score"]


def test_the_other_read_paths_carry_freshness(mem, repo):
    obs_id = remember(mem)
    repo.write("jobs.py", JOBS.replace("Read key=value lines.", "Read lines."))
    got = entities.get(mem, None, name="jobs")["observations"]
    assert got[0]["freshness"] == "changed" and got[0]["stale"] is True
    assert resources.entity_view(mem, None, "jobs")["observations"][0]["freshness"] == "changed"
    found = json.loads(hipocampo.search(mem, None, query="parse_config", format="json"))["results"]
    assert found[0]["id"] == obs_id and found[0]["freshness"] == "changed"
    text = hipocampo.search(mem, None, query="parse_config")
    assert "[code changed]" in text


# A body so different from JOBS that git's one-step rename detection (50% similarity) fails.
REWRITE = "\n".join(f"def helper_{n}(x):\n    return x + {n}\n\n" for n in range(40))


def one_step_renames(repo, commit):
    return repo.git("diff", "--name-status", "-M", "--diff-filter=R", commit, "--")


def test_a_file_renamed_then_heavily_edited_is_changed_not_missing(mem, repo):
    obs_id = remember(mem)
    anchored = repo.head()
    repo.git("mv", "jobs.py", "config_jobs.py")
    repo.commit("rename")
    parse_edited = JOBS.replace('keys[name.strip()] = value.strip()', 'keys[name] = value')
    repo.write("config_jobs.py", REWRITE + parse_edited[parse_edited.index("def parse_config"):])
    edit = repo.commit("rewrite config_jobs: helpers, parse_config keeps spaces")
    assert "jobs.py" not in one_step_renames(repo, anchored)  # what the old one-step check missed
    found = freshness(mem, obs_id)
    assert found["freshness"] == "changed" and found["stale"] is True
    assert found["anchors"][0]["path"] == "config_jobs.py" and found["anchors"][0]["changed_since"] == edit


def test_a_file_renamed_then_heavily_edited_around_an_unchanged_symbol_is_moved(mem, repo):
    obs_id = remember(mem)
    anchored = repo.head()
    repo.git("mv", "jobs.py", "config_jobs.py")
    repo.commit("rename")
    repo.write("config_jobs.py", REWRITE + JOBS[JOBS.index("def parse_config"):JOBS.index("def retry")])
    repo.commit("rewrite config_jobs around parse_config")
    assert "jobs.py" not in one_step_renames(repo, anchored)
    found = freshness(mem, obs_id)
    assert found["freshness"] == "moved" and found["anchors"][0]["path"] == "config_jobs.py"
    stored = mem.store.anchors_of([obs_id])[obs_id][0]
    assert stored["path"] == "config_jobs.py" and stored["commit_sha"] == repo.head()
    assert freshness(mem, obs_id)["freshness"] == "fresh"


def test_an_uncommitted_rename_is_followed(mem, repo):
    obs_id = remember(mem)
    repo.git("mv", "jobs.py", "config_jobs.py")  # staged, not committed
    found = freshness(mem, obs_id)
    assert found["freshness"] == "moved" and found["anchors"][0]["path"] == "config_jobs.py"


@pytest.fixture
def git_calls(tmp_path, monkeypatch):
    """Every git command the code under test runs, logged by a `git` on PATH that runs the real one."""
    real = shutil.which("git")
    folder, log = tmp_path / "shim", tmp_path / "git-calls.log"
    folder.mkdir()
    shim = folder / "git"
    shim.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")

    def calls():
        return log.read_text().splitlines() if log.exists() else []
    return calls


def test_repeated_reads_run_no_git_and_renames_are_asked_once_per_commit(mem, repo, git_calls):
    ids = [remember(mem, f"note {n} about parse_config and retry", symbol=symbol, entity=f"e{n}")
           for n, symbol in enumerate(["parse_config", "retry", "parse_config", "retry"])]
    repo.git("mv", "jobs.py", "config_jobs.py")
    repo.commit("rename")
    repo.write("config_jobs.py", REWRITE + JOBS.replace("return False", "return None"))
    edit = repo.commit("rewrite, retry returns None")
    before = len(git_calls())
    first = anchors.annotate(mem, None, ids, budget=30.0)
    assert [first[i]["freshness"] for i in ids] == ["moved", "changed", "moved", "changed"]
    cold = git_calls()[before:]
    assert sum(c.startswith("log --reverse --name-status") for c in cold) == 1  # one rename map, all 4 rows
    mem.settle()  # the moves re-anchored and changed_since recorded, after the answer
    stored = mem.store.anchors_of([ids[1]])[ids[1]][0]
    assert stored["status"] == "changed" and stored["changed_since"] == edit
    again = len(git_calls())
    second = anchors.annotate(mem, None, ids, budget=30.0)
    assert git_calls()[again:] == []  # statuses cached per file stamp, changed_since read from the row
    assert [second[i]["freshness"] for i in ids] == ["fresh", "changed", "fresh", "changed"]
    assert {second[i]["anchors"][0]["changed_since"] for i in ids[1::2]} == {edit}


def test_a_new_commit_or_an_edit_is_seen_despite_the_cache(mem, repo):
    obs_id = remember(mem)
    assert freshness(mem, obs_id)["freshness"] == "fresh"
    repo.write("jobs.py", JOBS.replace("Read key=value lines.", "Read lines."))
    assert freshness(mem, obs_id)["freshness"] == "changed"
    repo.write("jobs.py", JOBS)
    assert freshness(mem, obs_id)["freshness"] == "fresh"


def test_a_short_span_found_elsewhere_is_changed_not_moved(mem, repo):
    """One line such as ``return keys`` occurs by chance elsewhere: the code it named changed,
    it did not move (a false `moved` would re-anchor the memory to unrelated code as fresh)."""
    obs_id = write.add(mem, None, entity_name="jobs", content="parse_config returns the dict it built",
                       anchors=[{"path": "jobs.py", "lines": "10-10"}])["id"]
    repo.write("jobs.py", "def helper():\n    return keys\n\n\n"
               + JOBS.replace("    return keys\n", "    return dict(keys)\n"))
    repo.commit("parse_config returns a copy")
    found = freshness(mem, obs_id)
    assert found["freshness"] == "changed"
    assert mem.store.anchors_of([obs_id])[obs_id][0]["line_start"] == 10  # not re-anchored to helper


def test_the_same_text_at_two_places_is_not_a_move(mem, repo):
    obs_id = remember(mem, symbol=None)  # lines 4-10: parse_config
    body = JOBS[JOBS.index("def parse_config"):JOBS.index("def retry")]
    repo.write("jobs.py", "# header\n" + JOBS + "\n\n" + body)
    assert freshness(mem, obs_id)["freshness"] == "changed"  # two copies: neither is "the" original


def test_a_method_of_the_same_name_does_not_hide_a_changed_function(mem, repo):
    obs_id = remember(mem)
    changed = JOBS.replace('keys[name.strip()] = value.strip()', 'keys[name] = value')
    repo.write("jobs.py", changed + "\n\nclass Other:\n    def parse_config(self):\n        return {}\n")
    repo.commit("parse_config keeps spaces; Other has one too")
    found = freshness(mem, obs_id)
    assert found["freshness"] == "changed" and found["anchors"][0]["lines"] == [4, 10]
