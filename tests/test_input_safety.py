"""What an outside probe of the server found (issue 12), each fixed and held here: NUL
characters, the secret gate over every stored or logged text field and the placeholders it must
let through, dates and types checked before coercion, and the HTTP details (who a client is
without a client id, token length, the bearer scheme's case, degraded search)."""

from __future__ import annotations

import anyio
import httpx
import pytest

from cuba_memorys.errors import SecretRefused
from cuba_memorys.secrets_scan import find_secret, redact
from cuba_memorys.server.app import check_bind
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.services.search import verify
from mcp_helpers import run_stdio
from secrets_corpus import PLACEHOLDERS, SECRETS
from test_http import make_server, mcp_session  # noqa: F401 - make_server is a fixture

AWS = SECRETS[0].split()[-1]  # a real-format (generated) AWS access key id


# -- NUL characters ------------------------------------------------------------------------------
def test_a_nul_character_is_refused_everywhere_and_ingest_reports_it_by_index(location):
    async def body(agent):
        errors = [await agent.error("cuba_cronica", action="add", entity_name="e", content="\x00starts with NUL"),
                  await agent.error("cuba_cronica", action="add", entity_name="\x00", content="a fine text"),
                  await agent.error("cuba_pizarra", action="write", content="note\x00"),
                  await agent.error("cuba_alarma", error_type="Boom", error_message="\x00trace")]
        ingested = await agent.call("cuba_ingesta", action="ingest", items=[
            {"entity_name": "e", "content": "The first good item"},
            {"entity_name": "e", "content": "\x00the bad one"},
            {"entity_name": "e", "content": "The second good item"}])
        return errors, ingested

    errors, ingested = run_stdio(location, body)
    for message in errors:
        assert "NUL" in message and "internal error" not in message, message
    assert ingested["added"] == 2 and ingested["skipped_invalid"] == 1
    assert ingested["invalid"][0]["index"] == 1 and "items[1].content" in ingested["invalid"][0]["reason"]
    assert ingested["ids"][1] is None and ingested["ids"][0] and ingested["ids"][2]


# -- the secret gate ---------------------------------------------------------------------------
def test_the_labelled_set_every_secret_caught_no_placeholder_refused():
    missed = [s for s in SECRETS if find_secret(s) is None]
    refused = [(p, find_secret(p)) for p in PLACEHOLDERS if find_secret(p) is not None]
    assert not missed, f"{len(missed)} of {len(SECRETS)} real-format secrets missed: {missed}"
    assert not refused, f"{len(refused)} of {len(PLACEHOLDERS)} placeholders refused: {refused}"
    for secret in SECRETS:
        assert find_secret(f"Notes from today. {secret} — keep it safe.") is not None  # inside prose too


FIELDS = [
    ("cuba_cronica", {"action": "add", "entity_name": f"key {AWS}", "content": "a fact"}, "entity_name"),
    ("cuba_cronica", {"action": "batch_add", "observations": [{"entity_name": AWS, "content": "x y"}]},
     "observations[0].entity_name"),
    ("cuba_cronica", {"action": "episode_add", "entity_name": "ci", "content": "deployed",
                      "artifacts": [f"https://ci/{AWS}"]}, "artifacts[0]"),
    ("cuba_cronica", {"action": "episode_add", "entity_name": "ci", "content": "deployed", "actors": [AWS]},
     "actors[0]"),
    ("cuba_cronica", {"action": "episode_add", "entity_name": AWS, "content": "deployed"}, "entity_name"),
    ("cuba_alma", {"action": "create", "name": AWS}, "name"),
    ("cuba_alma", {"action": "update", "name": "e", "new_name": AWS}, "new_name"),
    ("cuba_puente", {"action": "create", "from_entity": "e", "to_entity": AWS}, "to_entity"),
    ("cuba_pizarra", {"action": "write", "content": "a note", "tag": AWS}, "tag"),
    ("cuba_proyecto", {"action": "switch", "name": AWS}, "name"),
    ("cuba_proyecto", {"action": "rename", "name": "p", "to": AWS}, "to"),
    ("cuba_jornada", {"action": "start", "project": AWS}, "name"),
    ("cuba_ingesta", {"action": "parse", "entity_name": AWS, "text": "A paragraph that is long enough."},
     "entity_name"),
    ("cuba_decreto", {"action": "record", "title": AWS, "chosen": "x"}, "title"),
    ("cuba_cronica", {"action": "add", "entity_name": "e", "content": SECRETS[2]}, "content"),
    ("cuba_cronica", {"action": "add", "entity_name": "e", "content": SECRETS[21]}, "content"),  # PGP key
    ("cuba_cronica", {"action": "add", "entity_name": "e", "content": SECRETS[23]}, "content"),  # HTTPS://
    ("cuba_cronica", {"action": "add", "entity_name": "e", "content": SECRETS[15]}, "content"),  # Bearer
]


def test_every_stored_text_field_goes_through_the_gate(location):
    async def body(agent):
        await agent.call("cuba_alma", action="create", name="e")
        await agent.call("cuba_proyecto", action="switch", name="p")
        await agent.call("cuba_proyecto", action="switch", name="*")
        out = [(param, await agent.error(tool, **args)) for tool, args, param in FIELDS]
        ingested = await agent.call("cuba_ingesta", action="ingest", items=[{"entity_name": AWS, "content": "x y z"}])
        listed = await agent.call("cuba_proyecto", action="list")
        return out, ingested, listed

    out, ingested, listed = run_stdio(location, body)
    for param, message in out:
        assert param in message and "refusing" in message, (param, message)
    assert ingested["added"] == 0 and "entity_name" in ingested["invalid"][0]["reason"]
    assert [p["name"] for p in listed["projects"]] == ["p"]


def test_a_verify_claim_with_a_credential_is_logged_redacted(memory):
    observations.add(memory, None, entity_name="ci", content="The deploy key is rotated monthly")
    answer = verify.verify(memory, None, f"The deploy key {AWS} is rotated monthly")
    assert answer["claim"].endswith("rotated monthly")  # the caller sees its own claim
    logged = [r[0] for r in memory.store._q("SELECT claim FROM verify_log")]
    assert logged == ["The deploy key [redacted AWS access key id] is rotated monthly"]
    assert redact("nothing secret here") == "nothing secret here"


def test_placeholders_in_a_coding_chat_are_stored(memory):
    rows = [{"entity_name": "config", "content": text} for text in PLACEHOLDERS]
    stored = observations.batch_add(memory, None, rows)
    assert stored["total_processed"] == len(PLACEHOLDERS) and all(stored["ids"])
    with pytest.raises(SecretRefused):
        observations.add(memory, None, entity_name="config", content=SECRETS[22])


# -- dates and types are checked, not coerced ------------------------------------------------------
def test_dates_and_types_are_checked_before_anything_is_coerced(location):
    async def body(agent):
        dated = await agent.call("cuba_cronica", action="episode_add", entity_name="ci", content="released 1.0",
                                 created_at="2025-03-04T05:06:07Z")
        listed = await agent.call("cuba_cronica", action="episode_list", entity_name="ci")
        return dated, listed, [
            await agent.error("cuba_cronica", action="episode_add", entity_name="ci", content="x y",
                              created_at="2026-13-45"),
            await agent.error("cuba_faro", query="release", after="2026-13-45T00:00:00Z"),
            await agent.error("cuba_faro", query="release", limit=True),
            await agent.error("cuba_cronica", action="add", entity_name="e", content="x y", allow_secret="true"),
            await agent.error("cuba_faro", query="release", enable_bm25="false")]

    dated, listed, errors = run_stdio(location, body)
    assert listed["episodes"][0]["started_at"].startswith("2025-03-04T05:06:07")
    for param, message in zip(("created_at", "after", "limit", "allow_secret", "enable_bm25"), errors):
        assert param in message, message


# -- HTTP ----------------------------------------------------------------------------------------
def test_a_short_token_cannot_guard_a_network_bind():
    from cuba_memorys.errors import ConfigError

    with pytest.raises(ConfigError, match="at least 32"):
        check_bind("0.0.0.0", "x" * 31)
    check_bind("0.0.0.0", "x" * 32)
    check_bind("127.0.0.1", "x")  # loopback needs no token at all


def test_http_scheme_case_and_clients_without_an_id(make_server):  # noqa: F811 - the fixture

    token = "t" * 40
    server = make_server(CUBA_HTTP_TOKEN=token).start()

    async def go():
        async with mcp_session(server.url, {"Authorization": f"bearer {token}"}) as one, \
                mcp_session(server.url, {"Authorization": f"BEARER {token}"}) as two:
            await one.call_tool("cuba_proyecto", {"action": "switch", "name": "alpha"})
            first = await one.call_tool("cuba_proyecto", {"action": "current"})
            second = await two.call_tool("cuba_proyecto", {"action": "current"})
            return first.structured_content, second.structured_content

    first, second = anyio.run(go)
    assert first["project"]["name"] == "alpha"
    assert second["project"] is None  # same declared client name, but its own session: its own project
    assert httpx.get(server.base + "/mcp", headers={"Authorization": "Basic " + token}).status_code == 401


def test_search_says_degraded_while_most_rows_have_no_vector(open_memory):
    blind = open_memory(embed_model="none")
    observations.batch_add(blind, None, [{"entity_name": "svc", "content": f"Service {n} listens on port {8000 + n}"}
                                         for n in range(6)])
    seeing = open_memory()
    observations.add(seeing, None, entity_name="svc", content="The gateway listens on port 443")
    search.faro(seeing, None, query="which port", track_access=False)
    seeing.settle()  # the coverage is counted after the answer
    answer = search.faro(seeing, None, query="which port", track_access=False)
    assert answer["degraded"] is True and answer["unembedded_share"] == round(6 / 7, 4)
    assert "reembed" in answer["degraded_reason"]
