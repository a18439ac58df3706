"""What an outside tester found (issue 30, items 9, 10 and 12), each fixed and held here.

9: a peer's notice (cuba_sync notify) and a verify claim (verify_log) keep no credential of the
corpus, multi-line private key blocks included. 10: with CUBA_AUDIT_KEY a chain rewritten as
plain SHA-256 is a downgrade, rows cut off the end are caught by the head kept in meta, and a
store from before that head adopts it without a false alarm. 12: an empty as_of and a NUL in
cuba_faro's tags or cuba_tools's query are refused, through the official MCP client over stdio.
Tampering goes through the raw database, as in test_audit.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest

from conftest import StoreLocation
from cuba_memorys.secrets_scan import find_secret, redact
from cuba_memorys.services.search import verify
from cuba_memorys.services.sync import peers
from mcp_helpers import Agent, run_stdio, stdio_agent
from secrets_corpus import PLACEHOLDERS, SECRETS
from test_answers import keys_problem
from test_audit import GENESIS, KEY, by_hand, raw, raw_rows, serve, tamper

HEAD_KEY = "audit_head"
# A credential's own characters: a run of key characters holding both letters and digits.
RUN = re.compile(r"[A-Za-z0-9+/_~-]{10,}")
KEY_BLOCKS = [s for s in SECRETS if "PRIVATE KEY" in s and "-----END" in s]


def credential_runs(secret: str) -> list[str]:
    return [r for r in RUN.findall(secret) if any(c.isdigit() for c in r) and any(c.isalpha() for c in r)]


def assert_kept_no_credential(kept: str, secret: str) -> None:
    assert find_secret(kept) is None, (secret, kept)
    leaked = [run for run in credential_runs(secret) if run in kept]
    assert not leaked, f"{leaked} of {secret!r} kept in {kept!r}"
    assert "[redacted " in kept


# -- 9: redaction --------------------------------------------------------------------------------
def test_redact_cuts_a_whole_key_block_and_keeps_the_text_around_it():
    assert len(KEY_BLOCKS) == 5  # RSA, OpenSSH, PGP, PKCS#8 in JSON, EC in prose
    for block in KEY_BLOCKS:
        assert_kept_no_credential(redact(block), block)
    ec = KEY_BLOCKS[-1]
    assert redact(ec) == "The deploy key is\n[redacted private key block]\nand it lives in Vault."
    account = redact(KEY_BLOCKS[3])
    assert account.startswith('{"type": "service_account", "private_key": "[redacted private key block]')
    assert account.endswith('"client_email": "ci@acme.iam"}')
    two = redact(f"old: {KEY_BLOCKS[0]}\nrotated on Monday; new: {KEY_BLOCKS[1]} done")
    assert two == "old: [redacted private key block]\nrotated on Monday; new: [redacted private key block]\n done"
    # a block pasted without its END line loses its body too, not only its first line
    cut = "-----BEGIN RSA PRIVATE KEY-----\n" + KEY_BLOCKS[0].split("\n\n")[1].rsplit("\n", 1)[0]
    assert_kept_no_credential(redact(cut + "\nthat was all"), cut)
    assert redact(cut + "\nthat was all").endswith("\nthat was all")


def test_a_peer_notice_keeps_no_credential_of_the_corpus(memory):
    for i, secret in enumerate(SECRETS):
        told = peers.notify(memory, None, summary=f"node-c rotated {secret} today", node_id=f"node-{i}")
        assert told["redacted"] and find_secret(secret).kind in told["redacted"], (secret, told)
        assert "replaced by [redacted" in told["note"] and told["recorded"] is True
    named = peers.notify(memory, None, summary="three new notes", node_id="node-named",
                         node_name=f"ci {SECRETS[0].split()[-1]}")
    assert named["redacted"] == ["AWS access key id"]
    kept = {n["node_id"]: n for n in memory.store.open_peer_notices(500)}
    assert len(kept) == len(SECRETS) + 1  # redacted, never refused: every notice is there
    for i, secret in enumerate(SECRETS):
        assert kept[f"node-{i}"]["summary"].startswith("node-c rotated ")
        assert_kept_no_credential(kept[f"node-{i}"]["summary"], secret)
    assert kept["node-named"]["node_name"] == "ci [redacted AWS access key id]"


def test_a_peer_notice_of_placeholders_is_kept_as_sent(memory):
    for text in PLACEHOLDERS:
        told = peers.notify(memory, None, summary=text, node_id="docs-node")
        assert "redacted" not in told, (text, told)
    kept = {n["summary"] for n in memory.store.open_peer_notices(500)}
    assert kept == set(PLACEHOLDERS)


def test_a_verify_claim_keeps_no_credential_of_the_corpus(memory):
    for secret in SECRETS:
        answer = verify.verify(memory, None, f"The runbook says {secret} opens the deploy")
        assert secret in answer["claim"]  # the caller sees its own claim; only the log is redacted
    logged = sorted(row[0] for row in memory.store._q("SELECT claim FROM verify_log"))
    expected = {secret: redact(f"The runbook says {secret} opens the deploy") for secret in SECRETS}
    assert logged == sorted(expected.values())
    for secret, claim in expected.items():
        assert_kept_no_credential(claim, secret)


def test_notify_over_stdio_says_what_it_redacted(location):
    block = KEY_BLOCKS[0]

    async def body(agent: Agent) -> tuple[dict, dict]:
        told = await agent.call("cuba_sync", action="notify", node_id="node-k",
                                summary=f"node-k exported its bundle\n{block}")
        return told, await agent.call("cuba_sync", action="status")

    told, status = run_stdio(location, body)
    assert told["redacted"] == ["private key block"] and "[redacted ...]" in told["note"]
    assert keys_problem("cuba_sync", "notify", told) is None
    (notice,) = [n for n in status["peer_notices"] if n["node_id"] == "node-k"]
    assert notice["summary"] == "node-k exported its bundle\n[redacted private key block]"


# -- 10: the audit chain's downgrade and its head ------------------------------------------------
def stored_head(where: StoreLocation) -> dict[str, Any] | None:
    with raw(where) as conn:
        row = conn.execute(f"SELECT value FROM meta WHERE key = '{HEAD_KEY}'").fetchone()
    return None if row is None else json.loads(row[0])


def set_head(where: StoreLocation, head: dict[str, Any] | None) -> None:
    """Change (or, with None, remove as a store from before the head has none) the head in meta."""
    with raw(where) as conn:
        conn.execute(f"DELETE FROM meta WHERE key = '{HEAD_KEY}'")
        if head is not None:
            conn.execute(f"INSERT INTO meta(key, value) VALUES ('{HEAD_KEY}', '{json.dumps(head)}')")


async def append(agent: Agent, n: int) -> list[dict]:
    return [await agent.call("cuba_archivo", action="append", event_action=f"step.{i}", payload={"i": i})
            for i in range(n)]


async def verify_chain(agent: Agent) -> dict:
    return await agent.call("cuba_archivo", action="verify")


def rewrite_as_plain_sha256(where: StoreLocation) -> str:
    """Recompute every link without the key, as someone with the database but not the key can;
    the new last hash."""
    prev = GENESIS
    for row in raw_rows(where):
        current = by_hand(None, {**row, "prev_hash": prev})
        tamper(where, "UPDATE audit_log SET prev_hash = ?, current_hash = ? WHERE id = ?", (prev, current, row["id"]))
        prev = current
    return prev


def test_with_the_key_a_chain_rewritten_as_plain_sha256_is_a_downgrade(location, home):
    keyed = {"CUBA_AUDIT_KEY": KEY}
    ids = [a["id"] for a in serve(location, home, lambda agent: append(agent, 4), **keyed)]
    last_hash = rewrite_as_plain_sha256(location)
    # ... and the head too, so that only the missing HMAC can tell
    set_head(location, {"last_id": ids[-1], "last_hash": last_hash, "rows": 4})
    rewritten = serve(location, home, verify_chain, **keyed)
    assert rewritten["ok"] is False and rewritten["downgraded"] is True, rewritten
    assert keys_problem("cuba_archivo", "verify", rewritten) is None
    assert "no row checked is HMAC-SHA256" in rewritten["reason"] and "downgrade" in rewritten["reason"]
    # a server without the key cannot tell: to it the chain is plain SHA-256, consistent
    assert serve(location, home, verify_chain)["ok"] is True


def test_with_the_key_an_unsealed_chain_is_not_ok_until_an_append_seals_it(location, home):
    """Rows written before the key was set: the answer says so, and the next append seals them."""
    serve(location, home, lambda agent: append(agent, 2))

    async def body(agent: Agent) -> tuple[dict, dict]:
        before = await verify_chain(agent)
        await append(agent, 1)
        return before, await verify_chain(agent)

    before, after = serve(location, home, body, CUBA_AUDIT_KEY=KEY)
    assert before["ok"] is False and before["downgraded"] is True and "set only after" in before["reason"]
    assert after["ok"] is True and after["rows_checked"] == 3 and after["unprotected_rows"] == 2


@pytest.mark.parametrize("key", [None, KEY], ids=["plain-sha256", "hmac"])
def test_rows_cut_off_the_end_are_caught_and_stay_caught(location, home, key):
    env = {"CUBA_AUDIT_KEY": key} if key else {}

    async def main() -> None:
        async with stdio_agent(location, HOME=str(home), CUBA_EMBED_MODEL="none", **env) as agent:
            ids = [a["id"] for a in await append(agent, 6)]
            assert (await verify_chain(agent))["ok"] is True
            tamper(location, "DELETE FROM audit_log WHERE id > ?", (ids[2],))  # the last 3 rows
            cut = await verify_chain(agent)
            assert cut["ok"] is False and cut["tail_cut"] is True, cut
            assert keys_problem("cuba_archivo", "verify", cut) is None
            assert f"last append was row {ids[-1]}" in cut["reason"] and "3 rows were removed" in cut["reason"]
            # an append goes on, and the head stays where it was: the evidence is not overwritten
            await append(agent, 1)
            assert (await verify_chain(agent))["tail_cut"] is True

    anyio.run(main)


def test_with_the_key_a_head_moved_back_after_a_cut_is_caught(location, home):
    async def main() -> None:
        async with stdio_agent(location, HOME=str(home), CUBA_EMBED_MODEL="none", CUBA_AUDIT_KEY=KEY) as agent:
            rows = await append(agent, 5)
            tamper(location, "DELETE FROM audit_log WHERE id > ?", (rows[1]["id"],))
            moved_back = {"last_id": rows[1]["id"], "last_hash": rows[1]["current_hash"], "rows": 2}
            set_head(location, moved_back)  # as a server without the key would write it: no tag
            untagged = await verify_chain(agent)
            assert untagged["ok"] is False and "carries no tag" in untagged["reason"]
            set_head(location, {**moved_back, "tag": "0" * 64})
            forged = await verify_chain(agent)
            assert forged["ok"] is False and "changed without CUBA_AUDIT_KEY" in forged["reason"]

    anyio.run(main)


def test_a_fresh_store_keeps_its_head_with_each_append(location, home):
    keyed = {"CUBA_AUDIT_KEY": KEY}

    async def body(agent: Agent) -> tuple[dict, list[dict], dict]:
        empty = await verify_chain(agent)
        return empty, await append(agent, 3), await verify_chain(agent)

    empty, rows, verified = serve(location, home, body, **keyed)
    assert empty == {"action": "verify", "ok": True, "rows_checked": 0, "unprotected_rows": 0}
    assert all("note" not in r for r in rows)  # nothing to adopt on a fresh chain
    assert verified == {"action": "verify", "ok": True, "rows_checked": 3, "unprotected_rows": 0}
    head = stored_head(location)
    assert head is not None and "adopted_at" not in head
    assert (head["last_id"], head["last_hash"], head["rows"]) == (rows[-1]["id"], rows[-1]["current_hash"], 3)
    assert len(head["tag"]) == 64


@pytest.mark.parametrize("key", [None, KEY], ids=["plain-sha256", "hmac"])
def test_a_store_from_before_the_head_adopts_it_and_says_so(location, home, key):
    """The head removed from meta between calls is a store written before the head existed."""
    env = {"CUBA_AUDIT_KEY": key} if key else {}

    async def main() -> None:
        async with stdio_agent(location, HOME=str(home), CUBA_EMBED_MODEL="none", **env) as agent:
            ids = [a["id"] for a in await append(agent, 4)]
            set_head(location, None)
            first, second = await verify_chain(agent), await verify_chain(agent)
            assert first["ok"] is True and "adopted" in first["head"] and "(4 rows)" in first["head"], first
            assert second["ok"] is True and "head" not in second  # adopted once
            assert keys_problem("cuba_archivo", "verify", first) is None
            assert stored_head(location)["rows"] == 4
            set_head(location, None)  # again, and this time an append comes first
            (appended,) = await append(agent, 1)
            assert "adopted" in appended["note"] and "(4 rows)" in appended["note"]
            assert keys_problem("cuba_archivo", "append", appended) is None
            after = await verify_chain(agent)
            assert after["ok"] is True and "head" not in after and stored_head(location)["rows"] == 5
            # from then on a cut tail is caught on the upgraded store too
            tamper(location, "DELETE FROM audit_log WHERE id > ?", (ids[2],))
            cut = await verify_chain(agent)
            assert cut["ok"] is False and cut["tail_cut"] is True and "2 rows were removed" in cut["reason"]

    anyio.run(main)


# -- 12: values that passed silently -----------------------------------------------------------
def test_an_empty_as_of_and_a_nul_in_tags_or_the_tool_query_are_refused(location):
    async def body(agent: Agent) -> tuple[dict[str, str], dict]:
        refused = {
            "as_of": await agent.error("cuba_faro", query="release", as_of=""),
            "tags": await agent.error("cuba_faro", query="release", tags="ops\x00prod"),
            "query": await agent.error("cuba_tools", query="fa\x00ro"),
        }
        return refused, await agent.call("cuba_tools", query="faro", detail="names")

    refused, found = run_stdio(location, body)
    assert "as_of" in refused["as_of"] and "empty" in refused["as_of"] and "RFC 3339" in refused["as_of"]
    assert "tags" in refused["tags"] and "NUL" in refused["tags"] and "comma-separated" in refused["tags"]
    assert "query" in refused["query"] and "NUL" in refused["query"] and "name or description" in refused["query"]
    for message in refused.values():
        assert "\n" not in message and "internal error" not in message.lower() and len(message) < 200, message
    assert "cuba_faro" in found["tools"]  # the same tool without the NUL is found
