"""The three-way git merge driver of the sync bundle (issue 17 item 5, "the merge driver merges";
services/sync/merge.py, merge_rules.py, cli/merge_driver.py).

Unit tests on files for each kind and rule (one side, both sides, delete vs edit, add/add,
conflicts kept, unknown fields refused, broken JSON on each side, unknown paths, %A untouched on
a refusal); byte-identity with real exports on both backends. The real command and real `git merge`
runs through the driver are in test_sync_merge_git.py.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from cuba_memorys.errors import InvalidInput
from cuba_memorys.services.graph import relations
from cuba_memorys.services.observations import write
from cuba_memorys.services.sync import bundle, export, merge

EXE = Path(sys.executable).with_name("cuba-memorys")
T0 = "2024-01-01T00:00:00.000000+00:00"
NODE_A, NODE_B = "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002"
ENTITY_ID = "e1e1e1e1-0000-4000-8000-000000000000"
ENTITY_PATH = ".cuba-memorys/entities/auth-service-e1e1e1e1.json"


def obs(n: int, content: str, created: str | None = None, **changes: Any) -> dict[str, Any]:
    """An observation as export writes it (its fields in the export's order)."""
    row = {"id": f"0000000{n}-0000-4000-8000-00000000000{n}", "content": content, "observation_type": "fact",
           "source": "agent", "importance": 0.5, "tags": ["auth"], "project_id": None, "session_id": None,
           "created_at": created or f"2024-01-0{n}T00:00:00.000000+00:00", "embedding_model": None,
           "updated_at": created or f"2024-01-0{n}T00:00:00.000000+00:00", "version": 1, "previous_versions": [],
           "origin_node": NODE_A, "evidence": "asserted", "verification": None, "verified_at": None,
           "trust": "trusted", "crdt_actor": NODE_A, "crdt_counter": 1}
    row.update(changes)
    return row


def entity(*observations: dict[str, Any], **changes: Any) -> dict[str, Any]:
    row = {"id": ENTITY_ID, "name": "Auth Service", "entity_type": "concept", "importance": 0.5,
           "access_count": 0, "project_id": None, "created_at": T0, "observations": list(observations)}
    row.update(changes)
    return row


def edited(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(row)
    out.update(changes)
    return out


def sides(tmp_path: Path, base: Any, ours: Any, theirs: Any) -> tuple[str, str, str]:
    """%O %A %B as files; a value that is bytes is written as is, None for %O is an empty file,
    "missing" no file at all."""
    paths = []
    for name, value in (("O", base), ("A", ours), ("B", theirs)):
        path = tmp_path / f".merge_file_{name}"
        if value == "missing":
            paths.append(str(path))
            continue
        data = value if isinstance(value, bytes) else b"" if value is None else bundle.encode(value)
        path.write_bytes(data)
        paths.append(str(path))
    return paths[0], paths[1], paths[2]


def run(tmp_path: Path, path: str, base: Any, ours: Any, theirs: Any) -> tuple[Any, dict[str, Any]]:
    """Merge in-process; (the parsed result in %A, the driver's answer)."""
    o, a, b = sides(tmp_path, base, ours, theirs)
    done = merge.merge_driver(o, a, b, path)
    data = Path(a).read_bytes()
    assert data.endswith(b"\n") and bundle.encode(json.loads(data)) == data or path.endswith("manifest.json")
    return json.loads(data), dict(done)


def refused(tmp_path: Path, path: str, base: Any, ours: Any, theirs: Any) -> str:
    """Merge expecting a refusal; checks %A was not touched; the message."""
    o, a, b = sides(tmp_path, base, ours, theirs)
    before, stat = Path(a).read_bytes(), Path(a).stat()
    with pytest.raises(InvalidInput) as caught:
        merge.merge_driver(o, a, b, path)
    assert Path(a).read_bytes() == before and Path(a).stat().st_mtime_ns == stat.st_mtime_ns
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    message = str(caught.value)
    assert "\n" not in message and "git keeps the conflict" in message
    return message


# -- the kind of a file --------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "kind"), [
    (ENTITY_PATH, "entity"), ("entities/x.json", "entity"), ("memory/sync/relations.json", "relations.json"),
    (".cuba-memorys/episodes/2024-05/e.json", "episode"), ("sync/episodes/undated/e.json", "episode"),
    ("episodes/e.json", "episode"), ("a/b/errors/x.json", "error"), ("decisions/x.json", "decision"),
    ("x/tombstones.json", "tombstones.json"), ("facts.json", "facts.json"), ("d/procedures.json", "procedures.json"),
    ("d/artifacts.json", "artifacts.json"), ("d/source_trust.json", "source_trust.json"),
    ("d/projects.json", "projects.json"), ("d/manifest.json", "manifest"), ("d/embeddings.bin.zst", "embeddings"),
    ("entities/relations.json", "relations.json"),  # the name is looked at first
    ("d/README.md", None), ("entities/x.txt", None), ("other/x.json", None), ("entities/.x.json.1.tmp", None),
    ("episodes/2024-05/deeper/x.json", None), ("", None)])
def test_file_kind_from_the_tail_of_the_path(path, kind):
    assert merge.file_kind(path) == kind


# -- entity files --------------------------------------------------------------------------------
def test_an_observation_changed_on_one_side_takes_that_side(tmp_path):
    one, two = obs(1, "tokens expire after 15 minutes"), obs(2, "keys rotate monthly")
    base = entity(one, two)
    theirs = entity(edited(one, content="tokens expire after 30 minutes", version=2, crdt_actor=NODE_B,
                           origin_node=NODE_B, updated_at="2024-02-01T00:00:00.000000+00:00"), two)
    ours = entity(one, edited(two, tags=["auth", "keys"], content="keys rotate weekly", version=2))
    merged, done = run(tmp_path, ENTITY_PATH, base, ours, theirs)
    assert done == {"path": ENTITY_PATH, "kind": "entity", "conflicts": 0}
    assert merged["observations"] == [theirs["observations"][0], ours["observations"][1]]
    assert "conflicts" not in merged
    # only theirs changed: the result is theirs, byte for byte
    o, a, b = sides(tmp_path, base, base, theirs)
    merge.merge_driver(o, a, b, ENTITY_PATH)
    assert Path(a).read_bytes() == bundle.encode(theirs)


def test_both_sides_changing_an_observation_alike_is_no_conflict(tmp_path):
    one = obs(1, "tokens expire after 15 minutes")
    same = edited(one, content="tokens expire after 1 hour", version=2)
    merged, done = run(tmp_path, ENTITY_PATH, entity(one), entity(same), entity(edited(same, crdt_actor=NODE_B)))
    assert done["conflicts"] == 0 and "conflicts" not in merged
    assert merged["observations"][0]["content"] == "tokens expire after 1 hour"
    assert merged["observations"][0]["crdt_actor"] in (NODE_A, NODE_B)


def test_both_sides_changing_an_observation_differently_keeps_ours_and_records_theirs(tmp_path):
    one, two = obs(1, "tokens expire after 15 minutes"), obs(2, "keys rotate monthly")
    ours_row = edited(one, content="tokens expire after 30 minutes", version=2, importance=0.6)
    theirs_row = edited(one, content="tokens expire after 5 minutes", version=3, importance=0.9,
                        crdt_actor=NODE_B, origin_node=NODE_B, updated_at="2024-03-01T00:00:00+00:00")
    merged, done = run(tmp_path, ENTITY_PATH, entity(one, two), entity(ours_row, two), entity(theirs_row, two))
    assert done["conflicts"] == 1
    kept = merged["observations"][0]
    assert kept["content"] == "tokens expire after 30 minutes" and kept["crdt_actor"] == NODE_A
    assert kept["importance"] == 0.9 and kept["version"] == 3  # counters and clocks: the max
    assert kept["updated_at"] == "2024-03-01T00:00:00+00:00"
    assert list(merged)[-1] == "conflicts" and list(merged)[-2] == "observations"
    assert merged["conflicts"] == [{"observation_id": one["id"], "theirs": theirs_row, "their_node": NODE_B}]


def test_counters_merge_by_max_and_never_conflict(tmp_path):
    one = obs(1, "tokens expire after 15 minutes")
    base = entity(one, importance=0.5, access_count=3)
    ours = entity(edited(one, importance=0.8), importance=0.7, access_count=9)
    theirs = entity(edited(one, importance=0.4), importance=0.9, access_count=4)
    merged, done = run(tmp_path, ENTITY_PATH, base, ours, theirs)
    assert done["conflicts"] == 0 and "conflicts" not in merged
    assert (merged["importance"], merged["access_count"]) == (0.9, 9)
    assert merged["observations"] == [edited(one, importance=0.8)]


def test_entity_fields_merge_three_way(tmp_path):
    base = entity(obs(1, "x"))
    merged, _ = run(tmp_path, ENTITY_PATH, base, base, edited(base, entity_type="technology"))
    assert merged["entity_type"] == "technology"
    merged, _ = run(tmp_path, ENTITY_PATH, base, edited(base, entity_type="pattern"),
                    edited(base, entity_type="technology", project_id="p1"))
    assert merged["entity_type"] == "pattern" and merged["project_id"] == "p1"  # both changed: ours


def test_a_delete_wins_over_no_change_and_an_edit_wins_over_a_delete(tmp_path):
    one, two, three = obs(1, "one"), obs(2, "two"), obs(3, "three")
    base = entity(one, two, three)
    ours = entity(two, edited(three, importance=0.9))  # deleted one; only a counter moved on three
    theirs = entity(one, edited(two, content="two, edited"))  # deleted three; edited two
    merged, _ = run(tmp_path, ENTITY_PATH, base, ours, theirs)
    assert [o["content"] for o in merged["observations"]] == ["two, edited"]
    # the other way round: an edit on the side that kept it beats the other side's delete
    merged, _ = run(tmp_path, ENTITY_PATH, base, entity(two, three), entity(edited(one, content="one!"), two, three))
    assert [o["content"] for o in merged["observations"]] == ["one!", "two", "three"]
    merged, _ = run(tmp_path, ENTITY_PATH, base, entity(edited(one, tags=["new"]), two, three), entity(two, three))
    assert [o["id"] for o in merged["observations"]] == [one["id"], two["id"], three["id"]]


def test_additions_on_both_sides_are_a_sorted_union(tmp_path):
    one = obs(1, "one")
    late, early = obs(3, "theirs, late", created="2024-05-01T00:00:00.000000+00:00"), obs(2, "ours, early")
    tie_a = obs(5, "same time a", created="2024-04-01T00:00:00.000000+00:00")
    tie_b = obs(4, "same time b", created="2024-04-01T00:00:00.000000+00:00")
    merged, done = run(tmp_path, ENTITY_PATH, entity(one), entity(one, early, tie_a), entity(one, late, tie_b))
    assert [o["content"] for o in merged["observations"]] == ["one", "ours, early", "same time b", "same time a",
                                                               "theirs, late"]
    assert done["conflicts"] == 0


@pytest.mark.parametrize("base", [None, b"   \n", "missing"], ids=["empty", "blank", "missing"])
def test_add_add_without_an_ancestor_is_a_union_with_conflicts_instead_of_losses(tmp_path, base):
    one, two = obs(1, "one"), obs(2, "two")
    ours = entity(one, edited(two, content="two, ours"), importance=0.6, entity_type="pattern", access_count=1)
    theirs = entity(edited(one, importance=0.8), edited(two, content="two, theirs"), obs(3, "three"),
                    importance=0.4, entity_type="technology", access_count=7)
    merged, done = run(tmp_path, ENTITY_PATH, base, ours, theirs)
    assert [o["content"] for o in merged["observations"]] == ["one", "two, ours", "three"]
    assert merged["observations"][0]["importance"] == 0.8
    assert (merged["importance"], merged["access_count"], merged["entity_type"]) == (0.6, 7, "pattern")
    assert done["conflicts"] == 1 and merged["conflicts"][0]["theirs"]["content"] == "two, theirs"


def test_conflicts_already_in_either_side_are_kept_once(tmp_path):
    one, two = obs(1, "one"), obs(2, "two")
    recorded = {"observation_id": one["id"], "theirs": edited(one, content="one, from c"), "their_node": "c"}
    other = {"observation_id": two["id"], "theirs": edited(two, content="two, from d"), "their_node": "d"}
    base = entity(one, two)
    ours = edited(base, conflicts=[recorded])
    theirs = edited(base, conflicts=[copy.deepcopy(recorded), other])
    merged, done = run(tmp_path, ENTITY_PATH, base, ours, theirs)
    assert merged["conflicts"] == [recorded, other] and done["conflicts"] == 0
    assert list(merged)[-1] == "conflicts"


def test_previous_versions_and_clocks_never_conflict(tmp_path):
    one = obs(1, "v1")
    ours = edited(one, content="v2", version=2, previous_versions=[{"content": "v1", "version": 1}])
    theirs = edited(one, verification="checked by hand", verified_at="2024-02-01T00:00:00+00:00")
    merged, done = run(tmp_path, ENTITY_PATH, entity(one), entity(ours), entity(theirs))
    # both changed what the observation says: ours kept, theirs recorded (the verification was of v1)
    assert done["conflicts"] == 1 and merged["observations"][0]["content"] == "v2"
    tidy = edited(one, previous_versions=[{"content": "v0"}], version=4)
    merged, done = run(tmp_path, ENTITY_PATH, entity(one), entity(edited(one, previous_versions=[{"content": "x"}])),
                       entity(tidy))
    assert done["conflicts"] == 0
    # a set of versions, each once, oldest first (then by text): the order the import keeps them in
    assert merged["observations"][0]["previous_versions"] == [{"content": "v0"}, {"content": "x"}]
    assert merged["observations"][0]["version"] == 4


def test_entity_files_that_cannot_be_merged_are_refused(tmp_path):
    good = entity(obs(1, "one"))
    assert "two different entities" in refused(tmp_path, ENTITY_PATH, good, good,
                                               edited(good, id="ffffffff-0000-4000-8000-000000000000"))
    assert "observations" in refused(tmp_path, ENTITY_PATH, good, good, edited(good, observations={"a": 1}))
    twice = entity(obs(1, "one"), obs(1, "one again"))
    assert "appears twice" in refused(tmp_path, ENTITY_PATH, good, twice, good)
    assert "JSON object" in refused(tmp_path, ENTITY_PATH, good, [good], good)
    assert "conflicts" in refused(tmp_path, ENTITY_PATH, good, edited(good, conflicts=[{"x": 1}]), good)


# -- broken sides and unknown paths ------------------------------------------------------------
@pytest.mark.parametrize("broken", ["base", "ours", "theirs"])
@pytest.mark.parametrize("path", [ENTITY_PATH, "sync/relations.json", "sync/manifest.json"])
def test_broken_json_on_any_side_is_refused_and_ours_left_alone(tmp_path, broken, path):
    good: Any = entity(obs(1, "one")) if "entities" in path else [] if "relations" in path else {"schema_version": 2}
    text = bundle.encode(good)
    files = {"base": text, "ours": text, "theirs": text}
    files[broken] = text[: len(text) // 2]  # truncated
    if path.endswith("manifest.json") and broken == "base":
        o, a, b = sides(tmp_path, files["base"], files["ours"], files["theirs"])
        merge.merge_driver(o, a, b, path)  # the manifest's ancestor is never read
        return
    message = refused(tmp_path, path, files["base"], files["ours"], files["theirs"])
    side = {"base": "base (%O)", "ours": "ours (%A)", "theirs": "theirs (%B)"}[broken]
    assert message.startswith(f"{side}: {path}: not valid JSON")


def test_not_utf8_and_missing_sides_are_refused(tmp_path):
    assert "not UTF-8" in refused(tmp_path, "d/facts.json", b"[]\n", b"[]\n", b"\xff\xfe[]")
    (tmp_path / "second").mkdir()
    o, a, b = sides(tmp_path / "second", None, [], "missing")
    with pytest.raises(InvalidInput, match=r"theirs \(%B\).*does not exist"):
        merge.merge_driver(o, a, b, "d/facts.json")


@pytest.mark.parametrize("path", ["README.md", ".cuba-memorys/notes/x.json", "entities/x.txt"])
def test_an_unknown_path_is_refused(tmp_path, path):
    assert refused(tmp_path, path, [], [], []).startswith(f"path (%P): {path}: not a file of the sync bundle")


def test_embeddings_have_no_rule(tmp_path):
    message = refused(tmp_path, ".cuba-memorys/embeddings.bin.zst", b"\x28\xb5", b"\x28\xb5\x01", b"\x28\xb5\x02")
    assert "embeddings.bin.zst has no merge rule" in message


def test_manifest_is_ours_byte_for_byte_when_both_agree(tmp_path):
    ours = {"schema_version": 2, "manifest_hash": "a" * 64, "project_id": "p", "project_name": "alpha",
            "exported_at": "2024-01-02T00:00:00+00:00", "counts": {"entities": 1}, "with_embeddings": False,
            "embedding_dim": 384, "node_id": NODE_A, "embedding_model": "m"}
    theirs = edited(ours, manifest_hash="b" * 64, exported_at="2024-03-01T00:00:00+00:00", node_id=NODE_B,
                    counts={"entities": 7})
    raw = json.dumps(ours).encode()  # not even the export's encoding: kept as it is
    o, a, b = sides(tmp_path, None, raw, theirs)
    merge.merge_driver(o, a, b, "sync/manifest.json")
    assert Path(a).read_bytes() == raw
    message = refused(tmp_path, "sync/manifest.json", None, ours, edited(theirs, embedding_dim=768, project_id="q"))
    assert "project_id" in message and "embedding_dim" in message and "768" in message


# -- row lists ------------------------------------------------------------------------------------
def relation(n: int, to: str, **changes: Any) -> dict[str, Any]:
    row = {"id": f"r{n}", "from_entity": "e-a", "to_entity": to, "relation_type": "uses", "strength": 0.5,
           "bidirectional": False, "project_id": None, "created_at": f"2024-01-0{n}T00:00:00+00:00",
           "provenance": "extracted"}
    row.update(changes)
    return row


def test_relations_union_max_strength_and_three_way_deletes(tmp_path):
    r1, r2, r3 = relation(1, "e-b"), relation(2, "e-c"), relation(3, "e-d")
    base = [r1, r2, r3]
    ours = [edited(r1, strength=0.9), r3, relation(5, "e-f")]  # deleted r2
    theirs = [edited(r1, strength=0.7, bidirectional=True), edited(r2, strength=0.8), relation(4, "e-e")]  # deleted r3
    merged, _ = run(tmp_path, "sync/relations.json", base, ours, theirs)
    # r1: theirs edited it (bidirectional), strength the max; r2: only a counter moved on theirs, so ours'
    # delete stands; r3: deleted by theirs, unchanged by ours; r4, r5: added
    assert merged == [edited(r1, strength=0.9, bidirectional=True), relation(4, "e-e"), relation(5, "e-f")]
    # the same (from, to, type) made on both sides with different ids: one row, the stronger
    mine, other = relation(1, "e-z", id="x1", strength=0.3), relation(2, "e-z", id="x2", strength=0.6)
    merged, _ = run(tmp_path, "sync/relations.json", None, [mine], [other])
    assert merged == [other]


def test_relations_delete_loses_to_an_edit(tmp_path):
    r1 = relation(1, "e-b")
    merged, _ = run(tmp_path, "sync/relations.json", [r1], [], [edited(r1, provenance="user")])
    assert merged == [edited(r1, provenance="user")]


def tombstone(row_id: str, at: str, node: str = NODE_A, table: str = "observations") -> dict[str, Any]:
    return {"table_name": table, "row_id": row_id, "deleted_at": at, "origin_node": node}


def test_tombstones_are_a_pure_union_later_wins_ties_to_the_greater_node(tmp_path):
    old = tombstone("o1", "2024-01-01T00:00:00+00:00")
    new = tombstone("o2", "2024-01-03T00:00:00+00:00", table="entities")
    merged, _ = run(tmp_path, "sync/tombstones.json", [old], [new], [old])
    assert merged == [old, new]  # gone from ours, unchanged on theirs: a tombstone is still never deleted
    a, b = tombstone("o1", "2024-01-05T00:00:00Z", NODE_A), tombstone("o1", "2024-01-04T00:00:00+00:00", NODE_B)
    merged, _ = run(tmp_path, "sync/tombstones.json", None, [b], [a])
    assert merged == [a]
    tie_a, tie_b = tombstone("o1", "2024-01-05T00:00:00+00:00", NODE_A), tombstone("o1", "2024-01-05T00:00:00+00:00",
                                                                                  NODE_B)
    assert run(tmp_path, "sync/tombstones.json", None, [tie_b], [tie_a])[0] == [tie_b]
    assert run(tmp_path, "sync/tombstones.json", None, [tie_a], [tie_b])[0] == [tie_b]
    assert "fields this version does not know (reason)" in refused(
        tmp_path, "sync/tombstones.json", [], [], [edited(old, reason="x")])


def fact(n: int, **changes: Any) -> dict[str, Any]:
    row = {"fact_id": f"f{n}", "subject": "Auth", "predicate": "fact", "object": "x", "valid_from": T0,
           "observed_at": T0, "valid_to": None, "subject_entity_id": ENTITY_ID, "project_id": None,
           "confidence": 0.5, "is_current": True, "created_at": T0, "layer_name": None}
    row.update(changes)
    return row


def test_facts_the_closed_version_wins_then_the_later_valid_to(tmp_path):
    f1, f2 = fact(1), fact(2, is_current=False, valid_to="2024-02-01T00:00:00+00:00")
    closed = edited(f1, is_current=False, valid_to="2024-03-01T00:00:00+00:00")
    merged, _ = run(tmp_path, "sync/facts.json", None, [f1, f2],
                    [closed, edited(f2, valid_to="2024-02-05T00:00:00+00:00")])
    assert merged == [closed, edited(f2, valid_to="2024-02-05T00:00:00+00:00")]
    merged, _ = run(tmp_path, "sync/facts.json", None, [closed], [f1])
    assert merged == [closed]
    # three-way: only ours changed something else: ours, even though theirs is "open" too
    merged, _ = run(tmp_path, "sync/facts.json", [f1], [edited(f1, confidence=0.9)], [f1])
    assert merged == [edited(f1, confidence=0.9)]


def procedure(**changes: Any) -> dict[str, Any]:
    row = {"id": "p1", "name": "deploy", "steps": ["build", "ship"], "created_at": T0, "updated_at": T0,
           "trigger_context": None, "preconditions": None, "verification": None, "success_count": 1,
           "failure_count": 0, "last_outcome": None, "last_used_at": None, "project_id": None,
           "embedding_model": None}
    row.update(changes)
    return row


def test_procedures_counts_max_and_the_later_update_wins(tmp_path):
    base = procedure()
    ours = procedure(success_count=5, steps=["build", "test", "ship"], updated_at="2024-02-01T00:00:00+00:00")
    theirs = procedure(failure_count=2, success_count=3, steps=["ship"], updated_at="2024-03-01T00:00:00+00:00")
    merged, _ = run(tmp_path, "sync/procedures.json", [base], [ours], [theirs])
    assert merged == [edited(theirs, success_count=5, failure_count=2)]
    # counts alone moving is not an edit: a delete on the other side stands
    assert run(tmp_path, "sync/procedures.json", [base], [], [procedure(success_count=9)])[0] == []
    assert "(vector)" in refused(tmp_path, "sync/procedures.json", [base], [edited(base, vector=[1])], [base])


def artifact(**changes: Any) -> dict[str, Any]:
    row = {"id": "a1", "path": "docs/a.md", "content": "v1", "content_hash": "h1", "version": 1, "project_id": "p",
           "origin_node": NODE_A, "crdt_actor": NODE_A, "crdt_counter": 1, "updated_at": T0}
    row.update(changes)
    return row


def test_artifacts_by_path_and_project_the_later_clock_wins(tmp_path):
    ours = artifact(content="ours", crdt_counter=3)
    theirs = artifact(id="a2", content="theirs", crdt_counter=3, crdt_actor=NODE_B)
    other_project = artifact(id="a3", project_id="q")
    merged, _ = run(tmp_path, "sync/artifacts.json", [artifact()], [ours], [theirs, other_project])
    assert merged == [theirs, other_project]  # equal counters: the greater actor
    merged, _ = run(tmp_path, "sync/artifacts.json", [artifact()], [ours], [artifact(content="t", crdt_counter=2)])
    assert merged == [ours]
    assert "content_sha" in refused(tmp_path, "sync/artifacts.json", None, [artifact(content_sha="x")], [])


def test_source_trust_every_count_the_max(tmp_path):
    base = [{"source": "agent", "alpha": 2.0, "beta": 1.0, "updated_at": T0}]
    ours = [{"source": "agent", "alpha": 5.0, "beta": 1.0, "updated_at": "2024-02-01T00:00:00+00:00"}]
    theirs = [{"source": "agent", "alpha": 3.0, "beta": 4.0, "updated_at": "2024-01-15T00:00:00+00:00"},
              {"source": "user", "alpha": 1.0, "beta": 1.0, "updated_at": T0}]
    merged, _ = run(tmp_path, "sync/source_trust.json", base, ours, theirs)
    assert merged == [{"source": "agent", "alpha": 5.0, "beta": 4.0, "updated_at": "2024-02-01T00:00:00+00:00"},
                      theirs[1]]
    assert "weight" in refused(tmp_path, "sync/source_trust.json", base, ours, [dict(theirs[1], weight=1)])
    assert "cannot be ordered" in refused(tmp_path, "sync/source_trust.json", base, ours,
                                          [dict(theirs[0], alpha="many")])


def test_projects_first_seen_wins_unless_only_theirs_changed(tmp_path):
    alpha = {"id": "p1", "name": "alpha", "created_at": T0}
    merged, _ = run(tmp_path, "sync/projects.json", [alpha], [alpha], [dict(alpha, name="alpha-2")])
    assert merged == [dict(alpha, name="alpha-2")]
    merged, _ = run(tmp_path, "sync/projects.json", [alpha], [dict(alpha, name="ours")], [dict(alpha, name="theirs")])
    assert merged == [dict(alpha, name="ours")]
    beta = {"id": "p0", "name": "beta", "created_at": T0}
    assert run(tmp_path, "sync/projects.json", None, [alpha], [beta])[0] == [beta, alpha]  # sorted by id


def test_row_lists_that_cannot_be_merged_are_refused(tmp_path):
    assert "must be a JSON list" in refused(tmp_path, "sync/facts.json", None, {"fact_id": "f1"}, [])
    assert "is not a JSON object" in refused(tmp_path, "sync/facts.json", None, [], ["f1"])
    assert "lacks fact_id" in refused(tmp_path, "sync/facts.json", None, [], [{"subject": "x"}])
    assert "two rows" in refused(tmp_path, "sync/facts.json", [], [fact(1), fact(1)], [])
    assert "base (%O)" in refused(tmp_path, "sync/facts.json", [fact(1, colour="red")], [], [])


# -- one-row files ------------------------------------------------------------------------------
def test_episodes_actors_and_artifacts_as_sets_importance_max_ended_at_later(tmp_path):
    base = {"id": "ep1", "entity_id": ENTITY_ID, "content": "deploy", "actors": ["ana", "bo"], "artifacts": [],
            "importance": 0.5, "project_id": None, "started_at": T0, "ended_at": None}
    ours = edited(base, actors=["ana", "cy"], importance=0.7, content="deploy to prod")
    theirs = edited(base, actors=["ana", "bo", "di"], artifacts=["log.txt"], importance=0.6,
                    ended_at="2024-01-02T00:00:00+00:00")
    merged, _ = run(tmp_path, ".cuba-memorys/episodes/2024-01/ep1.json", base, ours, theirs)
    assert merged == edited(base, actors=["ana", "cy", "di"], artifacts=["log.txt"], importance=0.7,
                            content="deploy to prod", ended_at="2024-01-02T00:00:00+00:00")
    assert list(merged) == list(base)
    assert "two different rows" in refused(tmp_path, "episodes/2024-01/ep1.json", base, ours, edited(theirs, id="x"))


def test_errors_resolved_is_an_or_and_the_solution_ours_else_theirs(tmp_path):
    base = {"id": "er1", "error_type": "Timeout", "error_message": "db timed out", "solution": None,
            "resolved": False, "project": None, "project_id": None, "created_at": T0}
    merged, _ = run(tmp_path, "x/errors/er1.json", base, base, edited(base, solution="raise the pool", resolved=True))
    assert (merged["solution"], merged["resolved"]) == ("raise the pool", True)
    merged, _ = run(tmp_path, "x/errors/er1.json", base, edited(base, solution="ours fix", resolved=False),
                    edited(base, solution="their fix", resolved=True))
    assert (merged["solution"], merged["resolved"]) == ("ours fix", True)
    merged, _ = run(tmp_path, "x/errors/er1.json", None, edited(base, solution=""), edited(base, solution="theirs"))
    assert merged["solution"] == "theirs"


def test_decisions_ours_unless_its_content_is_empty(tmp_path):
    base = {"id": "d1", "content": "use postgres"}
    assert run(tmp_path, "decisions/d1.json", base, base, {"id": "d1", "content": "use sqlite"})[0]["content"] == \
        "use sqlite"
    assert run(tmp_path, "decisions/d1.json", None, {"id": "d1", "content": "a"},
               {"id": "d1", "content": "b"})[0]["content"] == "a"
    assert run(tmp_path, "decisions/d1.json", None, {"id": "d1", "content": ""},
               {"id": "d1", "content": "b"})[0]["content"] == "b"


# -- byte-identity with real exports, both backends ------------------------------------------
def test_merging_real_exports_gives_the_exports_bytes(memory, tmp_path):
    """A one-sided change merges to exactly the export of that side, for every file of a real
    bundle (field order, indentation, sort orders of both backends)."""
    write.add(memory, None, entity_name="Auth Service", content="tokens expire after 15 minutes")
    write.add(memory, None, entity_name="Billing", content="invoices are issued on the 1st")
    relations.create(memory, None, from_entity="Billing", to_entity="Auth Service", relation_type="depends_on")
    before_dir, after_dir = tmp_path / "before", tmp_path / "after"
    export.export(memory, None, dir=str(before_dir), scope="all")
    for n in range(3):
        write.add(memory, None, entity_name="Auth Service", content=f"rotation rule number {n} applies")
    write.add(memory, None, entity_name="Gateway", content="the gateway terminates TLS")
    relations.create(memory, None, from_entity="Gateway", to_entity="Auth Service", relation_type="uses")
    relations.create(memory, None, from_entity="Billing", to_entity="Gateway", relation_type="depends_on")
    export.export(memory, None, dir=str(after_dir), scope="all")
    old, new = bundle.bundle_files(before_dir), bundle.bundle_files(after_dir)
    new["manifest.json"] = (after_dir / "manifest.json").read_bytes()
    old["manifest.json"] = (before_dir / "manifest.json").read_bytes()
    assert any(old.get(p) != data for p, data in new.items())
    work = tmp_path / "work"
    work.mkdir()
    for path, data in new.items():
        base = old.get(path, b"")
        for ours, theirs in ((base or data, data), (data, base or data), (data, data)):
            o, a, b = sides(work, base, ours, theirs)
            merge.merge_driver(o, a, b, f".cuba-memorys/{path}")
            assert Path(a).read_bytes() == (ours if path == "manifest.json" else data), path
