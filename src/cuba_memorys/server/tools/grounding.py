"""Grounding tools: cuba_juez (judge stored observation pairs) and cuba_contradiccion (scan).

Both use the verify judge chain: an installed NLI model, else the client's model through
sampling when the client offers it, else the conservative heuristic; responses say which.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from cuba_memorys.server.runtime import Runtime
from cuba_memorys.server.sampling import sampling_judge
from cuba_memorys.services import grounding as judging

Opt = Annotated


def build(rt: Runtime) -> list[tuple[str, Any, str, ToolAnnotations]]:
    def cuba_juez(
        action: Annotated[Literal["judge_pair", "scan_entity"], Field(description="What to judge")],
        observation_a: Opt[str | None, Field(description="judge_pair: first observation id")] = None,
        observation_b: Opt[str | None, Field(description="judge_pair: second observation id")] = None,
        entity_name: Opt[str | None, Field(description="scan_entity: entity whose ambiguous pairs to judge")] = None,
        max_pairs: Opt[int | None, Field(description="scan_entity: pairs to judge (default CUBA_JUEZ_MAX_PAIRS or 5, at most 50)")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        def run(mem, client):
            chain = mem.judge_chain(sampling_judge(ctx))
            if action == "judge_pair":
                return judging.judge_pair(mem, client, chain, observation_a, observation_b)
            return judging.scan_entity(mem, client, chain, entity_name, max_pairs)

        return rt.call(ctx, run)

    def cuba_contradiccion(
        action: Annotated[Literal["scan"], Field(description="scan")] = "scan",
        entity_name: Opt[str | None, Field(description="Entity to scan; omit to scan the most important entities")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return rt.call(ctx, lambda mem, client: judging.scan_contradictions(
            mem, client, mem.judge_chain(sampling_judge(ctx)), entity_name))

    judged = ToolAnnotations(readOnlyHint=False, destructiveHint=False)  # caches its judgments
    return [
        ("cuba_juez", cuba_juez, "Judge how two stored observations relate (contradicts, supersedes,"
         " complementary, unrelated, unknown), or scan an entity's ambiguous pairs (embedding cosine"
         " 0.6-0.8). Judgments are cached; the answer names the judge (nli, sampling, heuristic).", judged),
        ("cuba_contradiccion", cuba_contradiccion, "Scan stored observations for contradictions (cosine"
         " 0.3-0.85 with negation markers in English and Spanish, confirmed by the judge chain).", judged),
    ]
