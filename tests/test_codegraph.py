"""`cuba-memorys codegraph build` (issue 19; spec §4d; services/code/codegraph.py), on both
backends, over real git repositories made here: the entities, observations and edges a build
writes; a dry run's counts; a rebuild that duplicates nothing; unchanged files skipped; an edited
symbol updated in place; a removed symbol (or file) retired and undoable; ambiguous calls dropped;
the bad inputs refused; and the real CLI's JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.models import NewObservation, Scope
from cuba_memorys.services import audit
from cuba_memorys.services.code import codegraph
from cuba_memorys.services.lifecycle import undo
from test_sync_hooks import cli, git, git_env, isolated, new_repo

A_PY = '''\
import os
from pkg import util


def load(path):
    return parse(os.path.join(path, "x"))


def parse(text):
    return text.strip()


class Store:
    def save(self, value):
        return load(value)

    def run(self):
        return run()
'''

B_GO = '''\
package pkg

import "fmt"

type Store struct{}

func (s *Store) run() { fmt.Println(helper()) }

func helper() string { return "x" }
'''

C_RS = "use std::fmt;\n\nstruct Cfg;\n\nimpl Cfg {\n    fn new() -> Self { Cfg }\n}\n\nfn main() { Cfg::new(); }\n"
D_TS = ("import { x } from './x';\n\nexport interface Opts { a: number }\n\n"
        "export const make = (o: Opts) => build(o);\n\nfunction build(o: Opts) { return o; }\n")


@pytest.fixture
def env(tmp_path: Path, monkeypatch) -> dict[str, str]:
    env = git_env(tmp_path / "home")
    isolated(monkeypatch, env)  # in-process calls run git too: the test's environment
    return env


@pytest.fixture
def repo(tmp_path: Path, env: dict[str, str]) -> Path:
    root = new_repo(tmp_path / "proj", env)
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_text(A_PY)
    (root / "pkg" / "b.go").write_text(B_GO)
    (root / "src").mkdir()
    (root / "src" / "main.rs").write_text(C_RS)
    (root / "web.ts").write_text(D_TS)
    for skipped in ("node_modules", "build", ".venv", "target"):
        (root / skipped).mkdir()
        (root / skipped / "junk.py").write_text("def junk():\n    pass\n")
    (root / "logo.py").write_bytes(b"\x89PNG\x00\x00not source")
    (root / "notes.txt").write_text("not code\n")
    git(root, "add", ".", env=env)
    git(root, "commit", "-q", "-m", "code", env=env)
    (root / "linked.py").symlink_to(root / "pkg" / "a.py")
    return root.resolve()


@pytest.fixture
def mem(open_memory):
    return open_memory(embed_model="none")


def build(mem, repo: Path, **kw):
    return codegraph.build(mem, path=str(repo), cwd=repo, **kw)


def symbol_observations(mem, name: str, superseded: bool = False):
    project = mem.store.get_project("proj")
    entity = mem.store.get_entity(name, Scope(project["id"], include_unscoped=False))
    assert entity is not None, name
    return entity, mem.store.observations_of(entity.id, Scope(), include_superseded=superseded)


def edges_from(mem, entity_id: str) -> dict[tuple[str, str], float]:
    return {(r["to_name"], r["relation_type"]): r["strength"] for r in mem.store.relations_of([entity_id])
            if r["from_entity_id"] == entity_id}


def test_build_writes_symbols_observations_and_edges(mem, repo):
    dry = build(mem, repo, dry_run=True)
    assert dry["action"] == "codegraph_build" and dry["dry_run"] is True
    assert dry["files_parsed"] == 4 and dry["files_skipped"] == 2  # the binary .py and the symlink
    assert {s["path"]: s["reason"].split(" ")[-1] for s in dry["skipped"]}["linked.py"] == "symlink"
    assert dry["symbols_found"] == 14
    assert dry["import_statements"] == 5
    assert mem.store.get_project("proj") is None  # a dry run writes nothing, not even the project

    out = build(mem, repo)
    assert {k: out[k] for k in ("files_parsed", "files_unchanged", "symbols_written", "observations_added",
                                "symbols_retired", "import_edges_attempted")} == {
        "files_parsed": 4, "files_unchanged": 0, "symbols_written": 14, "observations_added": 14,
        "symbols_retired": 0, "import_edges_attempted": 5}
    assert out["call_edges_written"] == dry["call_edges_resolved"]
    entity, (obs,) = symbol_observations(mem, "pkg/a.py::Store::save")
    assert entity.entity_type == "code_symbol"
    assert obs.content == "method `save` in pkg/a.py:14-15\ndef save(self, value):"
    assert obs.observation_type == "context" and obs.source == "agent"
    row = mem.store.fetch_rows("observation", [obs.id])[obs.id]
    assert row["evidence"] == "observed" and row["verification"] == f"tree-sitter parse of pkg/a.py in {repo}"
    # calls: unique names only, never a self-loop; `run` is defined twice (Python and Go): dropped
    load, _ = symbol_observations(mem, "pkg/a.py::load")
    assert edges_from(mem, load.id) == {("pkg/a.py::parse", "uses"): 0.5}
    save, _ = symbol_observations(mem, "pkg/a.py::Store::save")
    assert edges_from(mem, save.id) == {("pkg/a.py::load", "uses"): 0.5}
    run, _ = symbol_observations(mem, "pkg/a.py::Store::run")
    assert edges_from(mem, run.id) == {}
    go_run, _ = symbol_observations(mem, "pkg/b.go::Store::run")
    assert edges_from(mem, go_run.id) == {("pkg/b.go::helper", "uses"): 0.5}
    main, _ = symbol_observations(mem, "src/main.rs::main")
    assert edges_from(mem, main.id) == {("src/main.rs::Cfg::new", "uses"): 0.5}
    # imports: <file>::<module> (module) depends_on <module> (external_dependency), provenance extracted
    module = mem.store.get_entity("pkg/a.py::os", Scope())
    assert module is not None and module.entity_type == "module"
    (rel,) = mem.store.relations_of([module.id])
    assert (rel["to_name"], rel["relation_type"], rel["provenance"], rel["to_type"]) == (
        "os", "depends_on", "extracted", "external_dependency")
    # nothing from the skipped folders
    assert mem.store.get_entity("node_modules/junk.py::junk", Scope()) is None
    assert mem.store.get_entity("build/junk.py::junk", Scope()) is None


def test_a_symlinked_folder_is_listed_as_skipped_not_followed(mem, repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.py").write_text("def secret():\n    pass\n")
    (repo / "pkg" / "out").symlink_to(elsewhere, target_is_directory=True)
    dry = build(mem, repo, dry_run=True)
    assert {"path": "pkg/out", "reason": "symlink"} in dry["skipped"]
    assert dry["files_parsed"] == 4 and dry["symbols_found"] == 14


def test_rebuild_skips_unchanged_files_and_duplicates_nothing(mem, repo):
    build(mem, repo)
    again = build(mem, repo)
    assert again["files_parsed"] == 0 and again["files_unchanged"] == 4
    assert again["observations_added"] == 0 and again["call_edges_written"] == 0
    full = build(mem, repo, full=True)  # every file re-read: edges strengthened, no new observation
    assert full["files_parsed"] == 4 and full["observations_added"] == 0 and full["observations_updated"] == 0
    load, observations = symbol_observations(mem, "pkg/a.py::load")
    assert len(observations) == 1
    assert edges_from(mem, load.id) == {("pkg/a.py::parse", "uses"): pytest.approx(0.6)}
    for _ in range(6):
        build(mem, repo, full=True)
    assert edges_from(mem, load.id) == {("pkg/a.py::parse", "uses"): 1.0}  # min(+0.1, 1)


def test_edited_symbol_is_updated_in_place_and_removed_ones_retired_and_undoable(mem, repo, env):
    build(mem, repo)
    _, (before,) = symbol_observations(mem, "pkg/a.py::parse")
    # parse moves down two lines (its text changes), load is removed, b.go is deleted
    edited = A_PY.replace('def load(path):\n    return parse(os.path.join(path, "x"))\n\n\n', "")
    edited = edited.replace("def parse(text):", "# a comment\n\n\ndef parse(text, strict=False):")
    (repo / "pkg" / "a.py").write_text(edited)
    (repo / "pkg" / "b.go").unlink()
    out = build(mem, repo)
    assert out["files_parsed"] == 1 and out["files_unchanged"] == 2 and out["files_deleted"] == 1
    assert out["observations_updated"] == 4  # parse, and Store and its methods (moved up)
    # load + the three symbols of b.go
    assert out["symbols_retired"] == 4 and out["undo_file"]
    events = [e for e in audit.tail(mem, None, limit=20)["entries"] if e["action"] == "memory.codegraph_build"]
    assert events[0]["payload"]["symbols_retired"] == 4
    assert events[0]["payload"]["undo_file"] == out["undo_file"]
    assert events[0]["payload"]["project_id"] == mem.store.get_project("proj")["id"]
    _, (after,) = symbol_observations(mem, "pkg/a.py::parse")
    assert after.id == before.id and after.version == before.version + 1
    assert after.content == "function `parse` in pkg/a.py:8-9\ndef parse(text, strict=False):"
    assert after.previous_versions[-1]["content"] == before.content
    _, gone = symbol_observations(mem, "pkg/a.py::load")
    assert gone == []
    _, kept = symbol_observations(mem, "pkg/a.py::load", superseded=True)
    assert [o.observation_type for o in kept] == ["superseded"]
    _, go_gone = symbol_observations(mem, "pkg/b.go::helper")
    assert go_gone == []
    # an agent's own note on a symbol entity is never touched by a build
    save, _ = symbol_observations(mem, "pkg/a.py::Store::save")
    note_id = mem.store.add_observation(NewObservation(entity_id=save.id, content="save must stay idempotent",
                                                       project_id=save.project_id))
    (repo / "pkg" / "a.py").write_text(edited.replace("class Store:", "class Depot:"))
    build(mem, repo)
    assert mem.store.get_observation(note_id, Scope()).observation_type == "fact"
    # the retirement is undone by its undo file
    undone = undo.apply(mem, out["undo_file"])
    assert undone["restored"]["observations"] == 4
    _, back = symbol_observations(mem, "pkg/a.py::load")
    assert [o.observation_type for o in back] == ["context"]


def test_bad_input_is_refused_with_clear_errors(mem, repo, tmp_path):
    with pytest.raises(InvalidInput, match=r"unknown language 'cobol'.*python, javascript"):
        build(mem, repo, languages=["python,cobol"])
    with pytest.raises(NotFound, match="no such directory"):
        codegraph.build(mem, path="nope", cwd=repo)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(InvalidInput, match="not inside a git work tree"):
        codegraph.build(mem, path=str(plain), cwd=repo)
    with pytest.raises(InvalidInput, match="not a directory"):
        codegraph.build(mem, path="web.ts", cwd=repo)
    only = build(mem, repo, languages=["rust", "typescript"], dry_run=True)
    assert only["languages"] == ["typescript", "tsx", "rust"] and only["files_parsed"] == 2
    sub = codegraph.build(mem, path="pkg", cwd=repo, project="proj", dry_run=True)
    assert sub["files_parsed"] == 2 and sub["root"] == str(repo)


def test_the_cli_prints_the_json_keys_and_errors(repo, env, tmp_path):
    env = {**env, "CUBA_DATA_DIR": str(tmp_path / "clidata")}
    done = cli(repo, "codegraph", "build", "--json", "--lang", "python", env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {"action", "dry_run", "files_parsed", "files_skipped", "files_unchanged", "symbols_written",
            "call_edges_written", "import_edges_attempted", "symbols_retired"} <= set(out)
    assert out["project"] == "proj" and out["files_parsed"] == 1
    dry = json.loads(cli(repo, "codegraph", "build", "--dry-run", "--json", env=env).stdout)
    assert {"symbols_found", "call_edges_resolved", "import_statements"} <= set(dry)
    bad = cli(repo, "codegraph", "build", "--lang", "cobol", env=env)
    assert bad.returncode == 2 and "unknown language 'cobol'" in bad.stderr
    text = cli(repo, "codegraph", "build", "--path", str(repo), env=env)
    assert text.returncode == 0 and "unchanged" in text.stdout


def test_gitignored_files_are_not_parsed(mem, repo, env):
    (repo / ".gitignore").write_text("venv/\ngenerated_*.py\n")
    (repo / "venv" / "lib").mkdir(parents=True)
    (repo / "venv" / "lib" / "site.py").write_text("def vendored():\n    pass\n")
    (repo / "generated_api.py").write_text("def generated():\n    pass\n")
    (repo / "fresh.py").write_text("def untracked_but_not_ignored():\n    pass\n")
    out = build(mem, repo)
    assert out["files_parsed"] == 5  # the four committed files and the untracked, unignored one
    assert mem.store.get_entity("venv/lib/site.py::vendored", Scope()) is None
    assert mem.store.get_entity("generated_api.py::generated", Scope()) is None
    assert mem.store.get_entity("fresh.py::untracked_but_not_ignored", Scope()) is not None
    assert all(not s["path"].startswith("venv/") for s in out["skipped"])


def test_a_file_name_that_is_not_utf8_is_skipped_with_a_reason(mem, repo):
    bad = os.fsencode(str(repo)) + b"/caf\xe9.py"
    with open(bad, "wb") as handle:
        handle.write(b"def latin():\n    pass\n")
    out = build(mem, repo)
    assert out["files_parsed"] == 4 and out["symbols_written"] == 14
    (item,) = [s for s in out["skipped"] if s["reason"] == "file name is not valid UTF-8"]
    assert item["path"] == "caf\ufffd.py"


def test_a_build_does_not_change_recalls_project_or_last_session(mem, repo):
    from cuba_memorys.services.sessions import recall

    work = mem.store.get_or_create_project("work")
    session = mem.store.start_session("fixing the invoices", [], "agent", work["id"])
    mem.store.end_session(session["id"], "success", "invoices fixed")
    before = recall.gather(mem, None)
    build(mem, repo)  # into project "proj"
    after = recall.gather(mem, None)
    assert before["project"]["name"] == after["project"]["name"] == "work"
    assert after["last_session"] == before["last_session"] and after["last_session"]["name"] == "fixing the invoices"
    assert [s["name"] for s in mem.store.list_sessions(Scope(), 5)] == ["fixing the invoices"]
    # a session an older build started (client "codegraph") does not pass for the user's either
    old = mem.store.start_session("codegraph build", [], codegraph.CLIENT, mem.store.get_project("proj")["id"])
    mem.store.end_session(old["id"], "success", "codegraph build")
    assert recall.gather(mem, None)["project"]["name"] == "work"
    assert recall.gather(mem, None)["last_session"] == before["last_session"]


def test_two_repositories_with_the_same_folder_name_keep_each_others_codegraph(mem, repo, env, tmp_path):
    other = new_repo(tmp_path / "elsewhere" / "proj", env)  # same folder name: same default project
    (other / "pkg").mkdir()
    (other / "pkg" / "a.py").write_text("def load(path):\n    return path\n\n\ndef only_here():\n    pass\n")
    git(other, "add", ".", env=env)
    git(other, "commit", "-q", "-m", "other", env=env)
    other = other.resolve()
    first = build(mem, repo)
    second = codegraph.build(mem, path=str(other), cwd=other)
    assert first["project"] == second["project"] == "proj"
    assert second["symbols_retired"] == 0 and second["observations_updated"] == 0
    _, observations = symbol_observations(mem, "pkg/a.py::load")
    assert sorted(o.content.split("\n")[1] for o in observations) == ["def load(path):", "def load(path):"]
    assert len(observations) == 2  # one per repository
    _, (kept,) = symbol_observations(mem, "pkg/a.py::parse")  # only the first repository has it: kept
    # rebuilding each changes nothing of the other's
    again = build(mem, repo, full=True)
    assert again["symbols_retired"] == 0 and again["observations_added"] == 0
    again = codegraph.build(mem, path=str(other), cwd=other, full=True)
    assert again["symbols_retired"] == 0 and again["observations_added"] == 0
    # the second repository drops its file: only its own observations are retired
    (other / "pkg" / "a.py").unlink()
    gone = codegraph.build(mem, path=str(other), cwd=other)
    assert gone["symbols_retired"] == 2 and gone["files_deleted"] == 1
    _, (left,) = symbol_observations(mem, "pkg/a.py::load")
    assert left.content.startswith("function `load` in pkg/a.py:5-")
    _, (still,) = symbol_observations(mem, "pkg/a.py::parse")
    assert still.id == kept.id


def test_the_sqlite_migration_check_passes_on_a_fresh_store_and_reports_a_lost_check(tmp_path):
    from cuba_memorys.errors import StorageError
    from cuba_memorys.storage.sqlite.db import SqliteDatabase

    db = SqliteDatabase(tmp_path / "m.db")
    assert "0016_codegraph.sql" in db.migrate()
    (sql,) = db.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'entities'").fetchone()
    assert "code_symbol" in sql
    assert db.migrate() == []  # opened again: checked, fine
    # a store where the recorded edit did not take (the CHECK as before 0016)
    db.conn.execute("PRAGMA writable_schema = ON")
    db.conn.execute("UPDATE sqlite_master SET sql = replace(sql, ?, '') WHERE type = 'table' AND name = 'entities'",
                    (",'code_symbol','module','external_dependency'",))
    db.conn.execute("PRAGMA writable_schema = RESET")
    db.close()
    again = SqliteDatabase(tmp_path / "m.db")
    with pytest.raises(StorageError, match="does not accept the code entity types") as caught:
        again.migrate()
    assert "schema_migrations WHERE version = 16" in (caught.value.hint or "")
    again.close()
