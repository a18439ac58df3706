"""Grounding: cuba_faro mode=verify, cuba_juez and cuba_contradiccion, with each judge of the
chain available or not, over the official MCP client.

The client's model (sampling) cannot run here, so the tests' client answers sampling requests
itself, as scripted models: a competent one (answers from the corpus' truth table), a liar that
calls everything support, and one that answers prose. That exercises the real sampling round
trip and the server's handling of each kind of answer; the NLI judge is tested with a small real
ONNX model in test_models-style fixtures."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import anyio
import pytest
from mcp import StdioServerParameters, types
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client

from conftest import SERVER_BIN
from grounding_corpus import FACTS, FALSE_CLAIMS, TRUE_CLAIMS, UNRELATED_CLAIMS, truth
from mcp_helpers import Agent, embeddings_settled
from tiny_models import build_nli_model

Model = Callable[[str], dict]  # prompt → the JSON object the scripted model answers


def _claim_and_evidence(prompt: str) -> tuple[str, str]:
    evidence = re.search(r"<evidence>\n(.*)\n</evidence>", prompt).group(1)
    claim = re.search(r"<claim>\n(.*)\n</claim>", prompt).group(1)
    return claim, evidence


def competent(prompt: str) -> dict:
    if "Claim:" in prompt:
        return {"verdict": truth(*_claim_and_evidence(prompt)), "confidence": 0.9, "reason": "corpus truth"}
    return {"verdict": "unrelated", "confidence": 0.6, "reason": "different topics"}


def liar(prompt: str) -> dict:
    return {"verdict": "supports" if "Claim:" in prompt else "complementary", "confidence": 0.99, "reason": "sure"}


def run_with_model(where, model: Model | None, body, **env: str) -> object:
    calls: list[str] = []

    async def sampling(context, params: types.CreateMessageRequestParams):
        prompt = params.messages[0].content.text
        calls.append(prompt)
        answer = model(prompt)
        text = answer if isinstance(answer, str) else json.dumps(answer)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=text),
                                         model="scripted-test-model", stop_reason="endTurn")

    async def main():
        params = StdioServerParameters(command=str(SERVER_BIN), args=[], env=where.env(**env))
        async with stdio_client(params) as (read, write), ClientSession(
                read, write, sampling_callback=sampling if model else None) as session:
            await session.initialize()
            agent = Agent(session)
            await agent.call("cuba_cronica", action="batch_add",
                             observations=[{"entity_name": e, "content": c} for e, c in FACTS])
            return await body(agent)

    return anyio.run(main), calls


async def verify_all(agent, format: str = "verbose") -> dict:
    """Every corpus claim verified; verbose (every row judged) unless ``format`` says otherwise."""
    claims = [c for c, _ in TRUE_CLAIMS] + [c for c, _, _ in FALSE_CLAIMS] + UNRELATED_CLAIMS
    return {claim: await agent.call("cuba_faro", query=claim, mode="verify", format=format) for claim in claims}


async def verify_both_ways(agent) -> tuple[dict, dict]:
    """Every claim with the default answer and with format=verbose, once the store has settled (so
    both see the same evidence)."""
    await embeddings_settled(agent)
    claims = [c for c, _ in TRUE_CLAIMS] + [c for c, _, _ in FALSE_CLAIMS] + UNRELATED_CLAIMS
    short = {claim: await agent.call("cuba_faro", query=claim, mode="verify") for claim in claims}
    return short, await verify_all(agent)


def _check_never_falsely_verified(results: dict) -> None:
    for claim, _, plain in FALSE_CLAIMS:
        assert results[claim]["grounding"] not in ("verified", "partial"), (claim, results[claim])
        if plain:
            assert results[claim]["grounding"] == "contradicted", (claim, results[claim])
    for claim in UNRELATED_CLAIMS:
        assert results[claim]["grounding"] in ("unknown", "weak"), (claim, results[claim])


def test_verify_without_a_model_judge(location):
    """No NLI model, no sampling: the text rules decide. They refute plainly, and a claim one
    observation states word for word is partial (never verified on one row's say-so)."""
    results, calls = run_with_model(location, None, verify_all)
    assert calls == []
    _check_never_falsely_verified(results)
    for claim, _ in TRUE_CLAIMS:
        result = results[claim]
        assert result["grounding"] == "partial" and result["judged_by"] == "heuristic", result
        assert 0.5 < result["confidence"] <= 0.7
        assert result["evidence"][0]["verdict"] == "supports" and result["evidence"][0]["rule"] == "states_claim"
    for claim, _, plain in FALSE_CLAIMS:
        if plain:
            assert {e.get("rule") for e in results[claim]["evidence"]} & {"negation", "number"}, results[claim]
    sample = results[FALSE_CLAIMS[0][0]]
    assert set(sample) >= {"mode", "claim", "confidence", "grounding", "interpretation", "evidence",
                           "evidence_count", "judged_by", "verdicts_reached"}
    assert sample["mode"] == "verify" and 0 < sample["confidence"] <= 1
    assert sample["evidence"][0]["content"] == FALSE_CLAIMS[0][1]
    assert all(e["similarity"] >= 0.40 for r in results.values() for e in r["evidence"])
    assert all(len(r["evidence"]) <= 10 for r in results.values())
    assert sum(1 for e in sample["evidence"] if "verdict" in e) <= 5  # only the first 5 are judged


def test_a_verify_answer_is_short_by_default_and_whole_when_verbose(location):
    """The default answer: verdict, confidence and the one or two rows that decided it (id, entity,
    at most 200 characters, the rule or judge), under 2,000 characters; format=verbose gives every
    row gathered, whole. The verdicts are the same either way."""
    (short, whole), _ = run_with_model(location, None, verify_both_ways)
    for claim, answer in short.items():
        assert len(json.dumps(answer, ensure_ascii=False)) <= 2000, (claim, answer)
        assert answer["grounding"] == whole[claim]["grounding"]
        assert answer["evidence_count"] == whole[claim]["evidence_count"] == len(whole[claim]["evidence"])
        assert len(answer["evidence"]) <= 2 and all(len(e["content"]) <= 200 for e in answer["evidence"])
        assert all({"id", "entity", "content", "similarity"} <= set(e) for e in answer["evidence"])
    for claim, _ in TRUE_CLAIMS:
        decided = short[claim]["evidence"]
        assert decided and all(e["verdict"] == "supports" for e in decided), short[claim]
    for claim, _, plain in FALSE_CLAIMS:
        if plain:
            assert short[claim]["evidence"][0]["verdict"] == "contradicts", short[claim]
            assert short[claim]["evidence"][0]["rule"] in ("negation", "number"), short[claim]
    long_claims = [c for c, a in whole.items() if len(json.dumps(a)) > 2000]
    assert long_claims, "the corpus should hold answers the default shortens"


def test_verify_with_the_clients_model(location):
    results, calls = run_with_model(location, competent, verify_all)
    assert calls, "the server should have asked the client's model"
    _check_never_falsely_verified(results)
    for claim, _ in TRUE_CLAIMS:
        assert results[claim]["grounding"] == "verified", results[claim]
        assert results[claim]["judged_by"] == "sampling"
    for claim, _, _ in FALSE_CLAIMS:
        assert results[claim]["grounding"] == "contradicted", results[claim]


def test_a_lying_model_cannot_verify_a_plainly_contradicted_claim(location):
    results, _ = run_with_model(location, liar, verify_all)
    for claim, _, plain in FALSE_CLAIMS:
        if plain:
            assert results[claim]["grounding"] == "contradicted", results[claim]
            assert any("overrules sampling" in e.get("reason", "") for e in results[claim]["evidence"])


def test_a_model_answering_prose_counts_as_unknown(location):
    results, calls = run_with_model(location, lambda prompt: "I think it's probably fine!", verify_all)
    assert calls
    for claim, _ in TRUE_CLAIMS:
        judged = [e for e in results[claim]["evidence"] if "verdict" in e]
        # prose is no verdict: only the text rules' plain statement of the claim stands (partial)
        assert judged and all(e["verdict"] == "unknown" or e["judged_by"] == "heuristic" for e in judged)
        assert all("sampling could not tell" in e["reason"] for e in judged if e["verdict"] == "supports")
        assert results[claim]["grounding"] == "partial"
    for claim in UNRELATED_CLAIMS:
        assert results[claim]["grounding"] == "unknown"


def test_verify_logs_each_call_and_validates_input(memory):
    from cuba_memorys.errors import InvalidInput
    from cuba_memorys.server import catalog
    from cuba_memorys.server.runtime import pick_action
    from cuba_memorys.services.observations import write as observations
    from cuba_memorys.services.search import verify

    observations.add(memory, None, entity_name="cache", content="We use Redis for session storage")
    out = verify.verify(memory, None, "We do not use Redis for session storage")
    assert out["grounding"] == "contradicted"
    logged = memory.store._q("SELECT claim, grounding_level, judged_by, outcome FROM verify_log")
    assert [tuple(r) for r in logged] == [("We do not use Redis for session storage", "contradicted",
                                           "heuristic", "pending")]
    empty = verify.verify(memory, None, "Nothing stored is like this sentence at all")
    assert empty["evidence_count"] in (0, len(empty["evidence"])) and empty["grounding"] in ("unknown", "weak")
    with pytest.raises(InvalidInput, match="query"):
        verify.verify(memory, None, "")
    with pytest.raises(InvalidInput, match="mode"):
        pick_action(catalog.tool("cuba_faro"), {"mode": "prove", "query": "x"})


async def juez_and_scan(agent) -> dict:
    stored = await agent.call("cuba_cronica", action="batch_add", observations=[
        {"entity_name": "cache", "content": "We do not use Redis for session storage"},
        {"entity_name": "cache", "content": "Sessions expire after 30 minutes of inactivity"}])
    listed = await agent.call("cuba_cronica", action="list", entity_name="cache")
    by_text = {o["content"]: o["id"] for o in listed["observations"]}
    a, b = by_text["We use Redis for session storage"], stored["ids"][0]
    out = {"first": await agent.call("cuba_juez", action="judge_pair", observation_a=a, observation_b=b),
           "again": await agent.call("memory_juez", action="judge_pair", observation_a=b, observation_b=a),
           "scan": await agent.call("cuba_juez", action="scan_entity", entity_name="cache", max_pairs=3),
           "contradictions": await agent.call("cuba_contradiccion", action="scan", entity_name="cache"),
           "all": await agent.call("cuba_contradiccion", action="scan"),
           "errors": [await agent.error("cuba_juez", action="judge_pair", observation_a=a),
                      await agent.error("cuba_juez", action="judge_pair", observation_a=a, observation_b="nope"),
                      await agent.error("cuba_juez", action="scan_entity", entity_name="ghost"),
                      await agent.error("cuba_juez", action="scan_entity", entity_name="cache", max_pairs=2.5),
                      await agent.error("cuba_contradiccion", action="scan", entity_name="ghost")]}
    out["pair"] = (a, b)
    return out


def test_juez_and_contradiccion_without_a_model_judge(location):
    out, _ = run_with_model(location, None, juez_and_scan)
    first = out["first"]
    assert first["cached"] is False and first["judgment"]["verdict"] == "contradicts"
    assert first["judgment"]["backend"] == "heuristic" and first["judgment"]["confidence"] == 0.5
    assert out["again"]["cached"] is True and out["again"]["judgment"] == first["judgment"]
    assert out["scan"]["ambiguous_band"] == [0.6, 0.8] and out["scan"]["backend"] == "heuristic"
    assert all(0.6 <= r["cosine_sim"] <= 0.8 for r in out["scan"]["results"])
    found = out["contradictions"]
    assert found["count"] >= 1 and found["entity_name"] == "cache"
    top = found["contradictions"][0]
    assert {top["observation_a"]["id"], top["observation_b"]["id"]} == set(out["pair"])
    assert top["negation_detected"] is True and top["judgment"]["verdict"] == "contradicts"
    assert out["all"]["entity_name"] is None and out["all"]["count"] >= 1
    for message in out["errors"]:
        assert "internal error" not in message
    assert "observation_b" in out["errors"][0] and "not found" in out["errors"][1]


def test_juez_with_the_clients_model(location):
    out, calls = run_with_model(location, competent, juez_and_scan)
    assert any("Older stored fact" in c for c in calls)
    # the model said "unrelated", but the pair plainly conflicts: the heuristic's veto stands
    assert out["first"]["judgment"]["verdict"] == "contradicts"
    assert "overrules sampling" in out["first"]["judgment"]["reason"]
    scanned = out["scan"]["results"]
    assert all(r["judgment"]["backend"] in ("sampling", "heuristic") for r in scanned)


@pytest.fixture(scope="module")
def nli_dir(tmp_path_factory) -> str:
    """A small real ONNX NLI model (tests/tiny_models.py: entailment when every content word of
    the hypothesis is in the premise, contradiction when exactly one side is negated)."""
    words = {w for text in [f for _, f in FACTS] + [c for c, _ in TRUE_CLAIMS] + [c for c, _, _ in FALSE_CLAIMS]
             + UNRELATED_CLAIMS for w in re.findall(r"\w+", text.lower())}
    return str(build_nli_model(tmp_path_factory.mktemp("nli") / "model", words=words))


def test_verify_with_the_nli_model(location, nli_dir):
    """The NLI model decides first; the client's model is not asked while NLI is there."""
    results, calls = run_with_model(location, liar, verify_all, CUBA_NLI_PATH=nli_dir)
    assert calls == []
    _check_never_falsely_verified(results)
    for claim, _ in TRUE_CLAIMS:
        assert results[claim]["grounding"] == "verified" and results[claim]["judged_by"] == "nli", results[claim]
    negated = results["We do not use Redis for session storage"]
    top = negated["evidence"][0]
    assert top["verdict"] == "contradicts" and top["judged_by"] == "nli" and "contradiction" in top["reason"]
    port = results["PostgreSQL listens on port 6432"]  # NLI sees no conflict; the heuristic does
    assert port["grounding"] == "contradicted"
    assert results["The API server is written in Java"]["grounding"] == "unknown"


def test_juez_with_the_nli_model(location, nli_dir):
    out, calls = run_with_model(location, None, juez_and_scan, CUBA_NLI_PATH=nli_dir)
    judgment = out["first"]["judgment"]
    assert judgment["backend"] == "nli" and judgment["verdict"] == "contradicts" and judgment["confidence"] > 0.9
    assert judgment["model"]
    assert out["contradictions"]["contradictions"][0]["judgment"]["backend"] == "nli"


def test_a_broken_nli_model_falls_back_to_the_next_judge(location, tmp_path):
    broken = tmp_path / "broken-nli"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"not a model")
    results, calls = run_with_model(location, competent, verify_all, CUBA_NLI_PATH=str(broken))
    assert calls and results[TRUE_CLAIMS[0][0]]["judged_by"] == "sampling"
