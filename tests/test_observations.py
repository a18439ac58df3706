"""cuba_cronica and cuba_alma through the service layer: writes, dedup, ids, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuba_memorys.errors import InvalidInput, NotFound, SecretRefused
from cuba_memorys.services.graph import entities, episodes
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search


def _count(mem) -> int:
    return mem.store.counts()["observations"]


def test_write_is_searchable_immediately(memory):
    added = observations.add(memory, None, entity_name="deploy",
                             content="Deploys run through GitHub Actions on every tag push")
    assert added["embedded"] is True
    found = search.faro(memory, None, query="how do we deploy?")
    rows = [r for r in found["results"] if r["t"] != "entity"]
    assert rows[0]["id"] == added["id"] and rows[0]["e"] == "deploy"
    assert "degraded" not in found


def test_exact_and_near_duplicates_are_not_stored_twice(memory):
    first = observations.add(memory, None, entity_name="db", content="The database is PostgreSQL 16 on port 5432")
    again = observations.add(memory, None, entity_name="db", content="The database is PostgreSQL 16 on port 5432.")
    assert again["deduplicated"] is True and again["id"] == first["id"]
    assert _count(memory) == 1


def test_a_changed_number_is_a_new_fact_not_a_duplicate(memory):
    observations.add(memory, None, entity_name="db", content="The database listens on port 5432")
    second = observations.add(memory, None, entity_name="db", content="The database listens on port 5433")
    assert "deduplicated" not in second and "prediction_error" not in second
    assert _count(memory) == 2
    contents = [r["c"] for r in search.faro(memory, None, query="database port")["results"]]
    assert any("5433" in c for c in contents) and any("5432" in c for c in contents)


def test_short_different_facts_on_one_entity_are_both_kept(memory):
    result = observations.batch_add(memory, None, [
        {"entity_name": "history", "content": "We migrated from MySQL"},
        {"entity_name": "history", "content": "We adopted Kubernetes"},
    ])
    assert result["added"] == 2 and len(set(result["ids"])) == 2


def test_same_text_on_another_entity_is_kept(memory):
    observations.add(memory, None, entity_name="a", content="Uses Redis for caching sessions")
    observations.add(memory, None, entity_name="b", content="Uses Redis for caching sessions")
    assert _count(memory) == 2


def test_batch_add_returns_ids_in_input_order_including_duplicates(memory):
    items = [
        {"entity_name": "svc", "content": "The queue worker is written in Go"},
        {"entity_name": "svc", "content": "Logs are shipped to Loki"},
        {"entity_name": "svc", "content": "The queue worker is written in Go"},  # dup of item 0
        {"entity_name": "other", "content": "Feature flags live in LaunchDarkly"},
    ]
    result = observations.batch_add(memory, None, items)
    ids = result["ids"]
    assert len(ids) == 4 and ids[2] == ids[0] and len(set(ids)) == 3
    assert (result["added"], result["deduplicated"], result["total_processed"]) == (3, 1, 4)
    for item, obs_id in zip(items, ids):
        row = memory.store.get_observation(obs_id, memory.scope(None))
        assert row.content == item["content"] and row.entity_name == item["entity_name"]


def test_batch_add_keeps_imported_dates(memory):
    result = observations.batch_add(memory, None, [
        {"entity_name": "history", "content": "We migrated from MySQL", "created_at": "2021-03-04T10:00:00"},
        {"entity_name": "history", "content": "We adopted Kubernetes", "created_at": "2024-06-01T08:30:00+02:00"},
    ])
    first = memory.store.get_observation(result["ids"][0], memory.scope(None))
    second = memory.store.get_observation(result["ids"][1], memory.scope(None))
    assert first.created_at.startswith("2021-03-04T10:00:00")
    assert second.created_at.startswith("2024-06-01T06:30:00")  # normalised to UTC
    old = search.faro(memory, None, query="migrated MySQL Kubernetes", before="2022-01-01T00:00:00Z")
    assert [r["id"] for r in old["results"] if r["t"] != "entity"] == [result["ids"][0]]


@pytest.mark.parametrize("bad_item, param", [
    ({"entity_name": "x"}, "observations[1].content"),
    ({"entity_name": "x", "content": ""}, "observations[1].content"),
    ({"entity_name": "x", "content": "y" * 10001}, "observations[1].content"),
    ({"content": "no entity"}, "observations[1].entity_name"),
    ({"entity_name": "x", "content": "ok", "observation_type": "gossip"}, "observations[1].observation_type"),
    ({"entity_name": "x", "content": "ok", "created_at": "last tuesday"}, "observations[1].created_at"),
    ("just a string", "observations[1]"),
])
def test_batch_add_rejects_a_bad_item_and_writes_nothing(memory, bad_item, param):
    good = {"entity_name": "x", "content": "a perfectly good observation"}
    with pytest.raises(InvalidInput) as err:
        observations.batch_add(memory, None, [good, bad_item])
    assert param in str(err.value)
    assert _count(memory) == 0 and memory.store.counts()["entities"] == 0


def test_batch_add_size_limits(memory):
    with pytest.raises(InvalidInput, match="observations"):
        observations.batch_add(memory, None, [])
    too_many = [{"entity_name": "e", "content": f"fact number {i}"} for i in range(101)]
    with pytest.raises(InvalidInput, match="1..100"):
        observations.batch_add(memory, None, too_many)
    assert _count(memory) == 0


@pytest.mark.parametrize("content, problem", [("", "empty"), ("   ", "empty"), ("x" * 10001, "1-10000")])
def test_add_rejects_bad_content(memory, content, problem):
    with pytest.raises(InvalidInput, match=problem):
        observations.add(memory, None, entity_name="e", content=content)
    assert _count(memory) == 0


def test_add_accepts_the_maximum_length(memory):
    observations.add(memory, None, entity_name="e", content="word " * 2000)
    assert _count(memory) == 1


@pytest.mark.parametrize("secret", [
    "the deploy key is AKIAJQ4Z7R2HX3NM5KPW",
    "export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz123456",
    "db password = hunter2hunter2",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE",
    "connect to postgresql://admin:s3cretpass@db.internal/prod",
])
def test_credentials_are_refused_unless_allowed(memory, secret):
    with pytest.raises(SecretRefused, match="allow_secret"):
        observations.add(memory, None, entity_name="creds", content=secret)
    assert _count(memory) == 0
    observations.add(memory, None, entity_name="creds", content=secret, allow_secret=True)
    assert _count(memory) == 1


def test_prose_about_passwords_is_not_a_secret(memory):
    observations.add(memory, None, entity_name="auth",
                     content="Passwords are hashed with argon2id; never log a password.")
    assert _count(memory) == 1


def test_delete_and_list(memory):
    a = observations.add(memory, None, entity_name="e", content="first fact about e")
    observations.add(memory, None, entity_name="e", content="second, unrelated statement")
    assert observations.list_for(memory, None, "e")["count"] == 2
    deleted = observations.delete(memory, None, a["id"])
    assert (deleted["action"], deleted["deleted_id"]) == ("delete", a["id"])
    assert Path(deleted["undo_file"]).is_file() and deleted["audit_id"] >= 1  # the way back, and the record
    listed = observations.list_for(memory, None, "e")
    assert listed["count"] == 1 and listed["observations"][0]["content"] == "second, unrelated statement"
    assert a["id"] not in [r["id"] for r in search.faro(memory, None, query="first fact about e")["results"]]
    with pytest.raises(NotFound):
        observations.delete(memory, None, a["id"])


def test_missing_entity_is_a_clear_error(memory):
    with pytest.raises(NotFound, match="Entity 'ghost' not found"):
        observations.list_for(memory, None, "ghost")
    with pytest.raises(NotFound):
        entities.get(memory, None, "ghost")


def test_entity_lifecycle_and_cascade(memory):
    created = entities.create(memory, None, "payments", "technology")
    assert created["already_existed"] is False and created["entity"]["entity_type"] == "technology"
    again = entities.create(memory, None, "payments")
    assert again["already_existed"] is True and again["entity"]["importance"] > created["entity"]["importance"]
    observations.add(memory, None, entity_name="payments", content="Payments go through Adyen")
    episodes.add(memory, None, entity_name="payments", content="Outage on Friday: Adyen timeouts", actors=["ana"])
    assert entities.rename(memory, None, "payments", "billing")["new_name"] == "billing"
    got = entities.get(memory, None, "billing")
    assert got["observation_count"] == 1 and got["entity"]["entity_type"] == "technology"
    assert entities.delete(memory, None, "billing")["cascade"] is True
    counts = memory.store.counts()
    assert counts["observations"] == 0 and counts["episodes"] == 0 and counts["entities"] == 0
    assert search.faro(memory, None, query="Adyen")["results"] == []


def test_entity_type_and_rename_validation(memory):
    with pytest.raises(InvalidInput, match="entity_type"):
        entities.create(memory, None, "x", "animal")
    entities.create(memory, None, "a")
    entities.create(memory, None, "b")
    with pytest.raises(InvalidInput, match="new_name"):
        entities.rename(memory, None, "a", "b")
    with pytest.raises(InvalidInput, match="name"):
        entities.create(memory, None, "n" * 201)


def test_episodes_and_timeline_are_ordered(memory):
    observations.batch_add(memory, None, [
        {"entity_name": "release", "content": "v1 shipped", "created_at": "2024-01-01T00:00:00Z"},
        {"entity_name": "release", "content": "v2 shipped with the new API", "created_at": "2025-01-01T00:00:00Z"},
    ])
    episodes.add(memory, None, entity_name="release", content="Release retro held", artifacts=["docs/retro.md"])
    listed = episodes.list_for(memory, None, "release")
    assert listed["count"] == 1 and listed["episodes"][0]["artifacts"] == ["docs/retro.md"]
    timeline = episodes.timeline(memory, None, "release")
    assert [i["content"] for i in timeline["items"]] == ["v1 shipped", "v2 shipped with the new API",
                                                          "Release retro held"]


@pytest.mark.parametrize("text", [
    "const accessToken = 'your-access-token';",
    "credentials:\n  api_key: <API_KEY_1>\n  email: user1@example.com",
    "export API_KEY=${API_KEY}",
    "password = process.env.DB_PASSWORD",
    "set password: ******** in the form",
])
def test_placeholders_are_not_secrets(memory, text):
    observations.add(memory, None, entity_name="docs", content=text)
    assert _count(memory) == 1
