"""Write, then find (issue 29): a row is found the moment its write is acknowledged, by words at
once and by meaning once embedded, and a half-embedded store does not rank pending rows below
equally good embedded ones."""

from __future__ import annotations

import pytest

from cuba_memorys.models import Hit
from cuba_memorys.search.fusion import BRANCH_WEIGHTS, score_fusion


def hits(kind: str, scored: list[tuple[str, float]]) -> list[Hit]:
    return [Hit(kind, row_id, score) for row_id, score in scored]


def test_with_nothing_embedded_the_fusion_ranks_as_the_lexical_branches_alone():
    text = hits("observation", [("a", 0.9), ("b", 0.5), ("c", 0.2)])
    bm25 = hits("observation", [("b", 7.0), ("c", 3.0), ("a", 1.0)])
    lexical = [f.id for f in score_fusion({"text": text, "bm25": bm25}, BRANCH_WEIGHTS)]
    pending = {("observation", i) for i in "abc"}
    fused = score_fusion({"text": text, "bm25": bm25, "vector": []}, BRANCH_WEIGHTS, {"vector": pending})
    assert [f.id for f in fused] == lexical


def test_a_pending_row_is_not_ranked_below_an_equal_embedded_row_for_lacking_a_vector():
    # "new" is the lexical branches' best but has no vector yet; "old" is lexically weaker and embedded.
    text = hits("observation", [("new", 0.9), ("old", 0.6), ("low", 0.1)])
    bm25 = hits("observation", [("new", 9.0), ("old", 6.0), ("low", 1.0)])
    vector = hits("observation", [("old", 0.85), ("low", 0.80), ("other", 0.70)])
    branches = {"text": text, "bm25": bm25, "vector": vector}
    unfair = score_fusion(branches, BRANCH_WEIGHTS)
    assert unfair[0].id == "old"  # what a half-embedded store did before issue 29
    fair = score_fusion(branches, BRANCH_WEIGHTS, {"vector": {("observation", "new")}})
    assert fair[0].id == "new"
    assert fair[0].score == pytest.approx(1.0)  # the best of both lexical branches, at full weight
    assert fair[0].branch_scores["rescaled_without"] == pytest.approx(BRANCH_WEIGHTS["vector"])
    # a row the vector branch did score keeps its score exactly
    assert {f.id: f.score for f in fair}["old"] == pytest.approx({f.id: f.score for f in unfair}["old"])


def test_a_row_the_vector_branch_scored_is_never_rescaled():
    vector = hits("observation", [("a", 0.9), ("b", 0.1)])
    text = hits("observation", [("a", 0.5), ("b", 0.4)])
    plain = score_fusion({"text": text, "vector": vector}, BRANCH_WEIGHTS)
    marked = score_fusion({"text": text, "vector": vector}, BRANCH_WEIGHTS, {"vector": {("observation", "a")}})
    assert [(f.id, f.score) for f in plain] == [(f.id, f.score) for f in marked]


# -- every read path sees a batch write at once (the queue held: its rows have no vector yet) ------
from cuba_memorys.services import grounding, incidents  # noqa: E402
from cuba_memorys.services.agents import contexto  # noqa: E402
from cuba_memorys.services.graph import entities  # noqa: E402
from cuba_memorys.services.observations import write  # noqa: E402
from cuba_memorys.services.search import hipocampo, verify  # noqa: E402

FACTS = [
    ("gateway", "The gateway retries failed webhooks five times with exponential backoff and jitter."),
    ("gateway", "The gateway keeps webhook payloads for seven days in the dead letter table."),
    ("gateway", "Webhook signatures are checked with the HMAC secret stored in the vault."),
    ("storage", "S3 is used only as an archive; nothing in S3 is the primary copy of a record."),
    ("storage", "The primary store is PostgreSQL, with a streaming replica in a second zone."),
    ("storage", "Backups of the primary store are taken every night and kept for thirty days."),
]
CLAIM = "The gateway retries failed webhooks five times with exponential backoff and jitter."


def batch(mem, rows=FACTS) -> list[str]:
    answer = write.batch_add(mem, None, [{"entity_name": e, "content": c} for e, c in rows])
    assert answer["embedding"] == "pending"
    return answer["ids"]


def settle(mem) -> None:
    assert mem.wait_for_embeddings(120)


CONFLICT = "The gateway retries failed webhooks three times with exponential backoff and jitter."


def test_verify_right_after_a_batch_write_judges_as_once_settled(memory):
    with memory.embedding_queue().hold():
        ids = batch(memory)
        assert memory.store.observation_vectors(ids) == {}
        at_once = [verify.verify(memory, None, query=claim, format="verbose") for claim in (CLAIM, CONFLICT)]
    # before issue 29: no evidence at all ("No stored observation is similar enough…")
    assert at_once[0]["evidence"][0]["id"] == ids[0] and at_once[1]["evidence"][0]["id"] == ids[0]
    assert at_once[1]["grounding"] == "contradicted"
    settle(memory)
    settled = [verify.verify(memory, None, query=claim, format="verbose") for claim in (CLAIM, CONFLICT)]
    for now, later in zip(at_once, settled):
        assert (now["grounding"], now["confidence"]) == (later["grounding"], later["confidence"])
        found, settled_ids = [e["id"] for e in now["evidence"]], [e["id"] for e in later["evidence"]]
        # the same rows in the same order; settled, the vector branch may add rows that share no
        # word with the claim (e5 puts every short English sentence above 0.4)
        assert found == [i for i in settled_ids if i in found] and found[0] == settled_ids[0]


def test_the_rows_verify_embedded_are_not_embedded_again_by_the_queue(memory):
    queue = memory.embedding_queue()
    with queue.hold():
        ids = batch(memory)
        verify.verify(memory, None, query=CLAIM)
        embedded_now = set(memory.store.observation_vectors(ids))
    assert ids[0] in embedded_now and len(embedded_now) < len(ids)  # a few, not the whole batch
    before = queue.embedded
    settle(memory)
    assert queue.embedded - before == len(ids) - len(embedded_now)


def test_juez_and_contradiccion_see_a_batch_at_once(memory):
    # cuba_juez pairs rows of cosine 0.6-0.8 (the original's band): e5 puts few pairs there
    rows = [("notes", "The office cafeteria serves vegetarian lunch at noon."),
            ("notes", "Quarterly revenue grew by twelve percent in Europe."),
            ("notes", "Mi perro se llama Bruno y le gusta el parque.")]
    conflicting = [("deploy", "Deploys to production run on Tuesdays after the change review."),
                   ("deploy", "Deploys to production do not run on Tuesdays after the change review.")]
    with memory.embedding_queue().hold():
        batch(memory, rows)
        ids = batch(memory, conflicting)
        pairs = grounding.scan_entity(memory, None, entity_name="notes")
        found = grounding.scan_contradictions(memory, None, entity_name="deploy")
    assert pairs["results"], "the scan paired none of the rows written a moment ago"
    (contradiction,) = found["contradictions"]
    assert {contradiction["observation_a"]["id"], contradiction["observation_b"]["id"]} == set(ids)
    settle(memory)
    again = grounding.scan_entity(memory, None, entity_name="notes")
    assert {(r["observation_a"], r["observation_b"]) for r in pairs["results"]} == \
        {(r["observation_a"], r["observation_b"]) for r in again["results"]}


def test_hipocampo_alma_and_contexto_list_a_batch_at_once(memory):
    with memory.embedding_queue().hold():
        ids = batch(memory)
        found = hipocampo.search(memory, None, query="dead letter table", format="json")
        got = entities.get(memory, None, name="storage")
        context = contexto.contexto(memory, None)
    import json

    assert ids[1] in [r["id"] for r in json.loads(found)["results"]]
    assert set(ids[3:]) <= {o["id"] for o in got["observations"]}
    assert any("S3" in row["snippet"] or "primary store" in row["snippet"] for row in context["layers"]["top_recall"])


def test_expediente_finds_an_error_the_moment_it_was_reported(memory):
    reported = incidents.report(memory, None, error_type="TimeoutError",
                                error_message="the billing export timed out after 30 s waiting for the ledger lock")
    found = incidents.search(memory, None, query="billing export timed out")
    assert reported["error_id"] in [e["id"] for e in found["results"]]


# -- long work shows its progress -----------------------------------------------------------------
import json as _json  # noqa: E402
import subprocess  # noqa: E402

from conftest import SERVER_BIN  # noqa: E402
from mcp_helpers import run_stdio  # noqa: E402


def long_rows(n: int) -> list[dict]:
    words = "the settlement job matches card captures to the acquirer report and flags the gaps for review"
    return [{"entity_name": f"settle{i % 3}", "content": f"Run {i}: " + " ".join([words] * 12) + f" ({i})"}
            for i in range(n)]


def test_a_batch_write_sends_mcp_progress_when_the_client_asks(location):
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done, total, message):
        seen.append((done, total, message))

    async def body(agent):
        result = await agent.session.call_tool("cuba_cronica", {"action": "batch_add", "observations": long_rows(70)},
                                               progress_callback=progress)
        assert not result.is_error, result.content[0].text
        return result.structured_content

    answer = run_stdio(location, body, CUBA_EMBED_QUEUE="off")
    assert answer["added"] + answer["deduplicated"] + answer["reinforced"] == 70
    assert seen and all(total == 70 for _, total, _ in seen)
    assert [done for done, _, _ in seen] == sorted(done for done, _, _ in seen)  # in order
    assert {m for _, _, m in seen} >= {"embedding", "writing", "written"} and seen[-1][0] == 70


def test_a_cli_import_waits_for_the_vectors_and_says_so(location, tmp_path):
    rows = [{"type": "entity", "name": f"svc{i}", "entityType": "service",
             "observations": [r["content"] for r in long_rows(8)[i::4]]} for i in range(4)]
    source = tmp_path / "memory.jsonl"
    source.write_text("".join(_json.dumps(r) + "\n" for r in rows))
    env = location.env()
    done = subprocess.run([str(SERVER_BIN), "import", str(source), "--format", "mcp-jsonl", "--apply"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "embedding" in done.stderr and "rows/s" in done.stderr  # plain progress lines: not a terminal
    assert "still wait for their vectors" not in done.stdout
    check = subprocess.run([str(SERVER_BIN), "doctor", "--json"], env=env, capture_output=True, text=True,
                           timeout=300)
    assert '"missing": 0' in check.stdout.replace(" ", "").replace('"missing":0', '"missing": 0')

    again = tmp_path / "more.jsonl"
    again.write_text(_json.dumps({"type": "entity", "name": "more", "entityType": "service",
                                  "observations": [r["content"] + " more" for r in long_rows(6)]}) + "\n")
    quick = subprocess.run([str(SERVER_BIN), "import", str(again), "--format", "mcp-jsonl", "--apply", "--no-wait"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert quick.returncode == 0, quick.stderr
    assert "still wait for their vectors" in quick.stdout and "next server start" in quick.stdout
