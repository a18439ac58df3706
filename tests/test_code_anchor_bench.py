"""bench/code_anchors/build_set.py (issue 19, §5) on a small real git history made here: the
memories and anchors each commit gives, the (query, relevant) pairs of later commits and the
staleness labels at HEAD — so the benchmark's builder cannot break unnoticed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from test_sync_hooks import git, git_env, new_repo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench folder is not installed

from bench.code_anchors import build_set, sentences

MODULE_1 = '''def parse_config(text):
    return dict(line.split("=", 1) for line in text.splitlines())


def load(path):
    return open(path).read()


class Store:
    def save(self, rows):
        self.rows = list(rows)
'''
MODULE_2 = MODULE_1.replace('''    return dict(line.split("=", 1) for line in text.splitlines())''',
                            '''    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return dict(pairs)''')
MODULE_4 = '''def parse_config(text):
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value for key, value in pairs}


class Store:
    def save(self, rows):
        self.rows = [dict(row) for row in rows]
'''


@pytest.fixture
def history(tmp_path: Path, monkeypatch) -> tuple[Path, list[str]]:
    """Five commits: the module; parse_config edited; docs only; parse_config and Store.save edited
    and load deleted; the module renamed without an edit. Returns the root and the shas."""
    env = git_env(tmp_path / "home")
    for key in [k for k in os.environ if k.startswith("GIT_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("GIT_") or key == "HOME":
            monkeypatch.setenv(key, value)
    root = new_repo(tmp_path / "repo", env)
    module = root / "src" / "pkg" / "mod.py"
    module.parent.mkdir(parents=True)
    shas = []

    def commit(message: str) -> None:
        git(root, "add", "-A", env=env)
        git(root, "commit", "-q", "-m", message, env=env)
        shas.append(git(root, "rev-parse", "HEAD", env=env).stdout.strip())

    module.write_text(MODULE_1)
    commit("Add parse_config and load; Store saves rows in memory")
    module.write_text(MODULE_2)
    commit("parse_config skips lines without a key")
    (root / "README.md").write_text("key=value per line\n")
    commit("Docs for the config format")
    module.write_text(MODULE_4)
    commit("Store.save copies rows; drop load\n\n- parse_config strips\n  spaces around keys\n"
           "- load was unused. Nobody called it.\n")
    git(root, "mv", "src/pkg/mod.py", "src/pkg/config.py", env=env)
    commit("Move the module to config.py")
    return root.resolve(), shas


def test_commits_memories_and_anchors(history):
    root, shas = history
    data = build_set.build(root)
    # the docs-only commit touches no src/**/*.py: not walked
    assert [c["sha"] for c in data["commits"]] == [shas[0], shas[1], shas[3], shas[4]]
    assert data["head"] == shas[4]
    texts = {m["id"]: m["text"] for m in data["memories"]}
    assert texts == {
        "m0000-00": "Add parse_config and load", "m0000-01": "Store saves rows in memory",
        "m0001-00": "parse_config skips lines without a key",
        "m0002-00": "Store.save copies rows",  # "drop load" has too few words to stand alone
        "m0002-01": "parse_config strips spaces around keys", "m0002-02": "load was unused.",
        "m0002-03": "Nobody called it.", "m0003-00": "Move the module to config.py"}
    anchors = {m["id"]: [a["symbol"] for a in m["anchors"]] for m in data["memories"]}
    # the innermost touched symbols: Store::save, not the class around it
    assert anchors["m0000-00"] == anchors["m0000-01"] == ["Store::save", "load", "parse_config"]
    assert anchors["m0001-00"] == ["parse_config"]
    assert anchors["m0002-00"] == anchors["m0002-03"] == ["Store::save", "parse_config"]
    assert anchors["m0003-00"] == []  # a pure rename touches no lines
    first = next(m for m in data["memories"] if m["id"] == "m0000-00")
    assert {a["path"] for a in first["anchors"]} == {"src/pkg/mod.py"}
    assert [a["lines"] for a in first["anchors"]] == [[10, 11], [5, 6], [1, 2]]
    assert data["stats"] | {"staleness": None} == {
        "commits": 4, "memories": 8, "anchored_memories": 7, "anchors": 3 + 3 + 1 + 4 * 2, "queries": 2,
        "relevant_pairs": 5, "staleness": None, "symbols_skipped_ambiguous_name": 0}


def test_queries_pair_later_diffs_with_earlier_memories(history):
    root, shas = history
    queries = {q["id"]: q for q in build_set.build(root)["queries"]}
    assert sorted(queries) == ["q0001", "q0002"]
    assert queries["q0001"]["commit"] == shas[1]
    assert queries["q0001"]["query"] == "parse_config skips lines without a key"
    assert queries["q0001"]["relevant"] == ["m0000-00", "m0000-01"]
    assert '+    pairs = (line.split("=", 1)' in queries["q0001"]["diff"]
    # the later edit of parse_config and Store.save: every earlier memory anchored to either
    assert queries["q0002"]["relevant"] == ["m0000-00", "m0000-01", "m0001-00"]
    assert queries["q0002"]["query"] == "Store.save copies rows; drop load"
    assert "-def load(path):" in queries["q0002"]["diff"] and "README" not in queries["q0002"]["diff"]


def test_staleness_labels_at_head_follow_the_rename(history):
    root, _ = history
    labels = {s["memory"]: (s["label"], s["anchor_labels"]) for s in build_set.build(root)["staleness"]}
    assert labels["m0000-00"] == ("missing", ["changed", "missing", "changed"])  # load is gone
    assert labels["m0001-00"] == ("changed", ["changed"])
    # written at the fourth commit; the file was renamed since, its text is the same
    assert labels["m0002-01"] == ("fresh", ["fresh", "fresh"])
    assert "m0003-00" not in labels  # unanchored: no label
    assert sorted({label for label, _ in labels.values()}) == ["changed", "fresh", "missing"]


def test_the_set_is_deterministic_and_written_where_asked(history, tmp_path, monkeypatch):
    root, _ = history
    out = tmp_path / "cache" / "set.json"
    monkeypatch.setattr(sys, "argv", ["build_set", "--root", str(root), "--out", str(out)])
    build_set.main()
    assert json.loads(out.read_text()) == build_set.build(root)
    assert not (root / "bench").exists()  # nothing written into the repository built from


def test_sentences_keep_the_words_as_written():
    text = ("One thing first; another thing here\n\nA paragraph that goes on. And a second sentence.\n"
            "- a bullet\n  continued here\n")
    assert sentences.split(text) == ["One thing first", "another thing here", "A paragraph that goes on.",
                                     "And a second sentence.", "a bullet continued here"]
    assert sentences.split("") == [] and sentences.split("\n\nbody only") == []
