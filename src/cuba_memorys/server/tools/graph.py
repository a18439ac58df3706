"""The core knowledge-graph tools: cuba_alma, cuba_cronica, cuba_puente, cuba_faro, cuba_proyecto.

Each tool's Python signature is its MCP input schema. Tools only pick the service for the
action and pass arguments through; validation and behaviour live in the services.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from cuba_memorys.errors import InvalidInput
from cuba_memorys.server.runtime import Runtime
from cuba_memorys.server.sampling import sampling_judge
from cuba_memorys.services.graph import entities as entity_svc
from cuba_memorys.services.graph import episodes as episode_svc
from cuba_memorys.services.graph import projects as project_svc
from cuba_memorys.services.graph import relations as relation_svc
from cuba_memorys.services.observations import write as observation_svc
from cuba_memorys.services.search import faro as search_svc

Opt = Annotated  # readability: Opt[type, Field(...)] marks an optional parameter


def _need(param: str, value: Any, action: str) -> Any:
    if value is None or value == "":
        raise InvalidInput(param, f"is required for action={action}")
    return value


def build(rt: Runtime) -> list[tuple[str, Any, str, ToolAnnotations]]:
    """(name, function, description, annotations) for each core tool."""

    def cuba_alma(
        action: Annotated[Literal["create", "update", "delete", "get"], Field(description="What to do with the entity")],
        name: Annotated[str, Field(description="Entity name (1-200 chars)")],
        entity_type: Opt[str | None, Field(description="concept (default), project, technology, person, pattern or config")] = None,
        new_name: Opt[str | None, Field(description="New name, for action=update")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        if action == "create":
            return rt.call(ctx, entity_svc.create, name, entity_type)
        if action == "update":
            return rt.call(ctx, lambda m, c: entity_svc.rename(m, c, name, _need("new_name", new_name, action)))
        if action == "delete":
            return rt.call(ctx, entity_svc.delete, name)
        return rt.call(ctx, entity_svc.get, name)

    def cuba_cronica(
        action: Annotated[Literal["add", "delete", "list", "batch_add", "episode_add", "episode_list", "timeline"],
                          Field(description="What to do")],
        entity_name: Opt[str | None, Field(description="Entity the observation belongs to (auto-created)")] = None,
        content: Opt[str | None, Field(description="Observation or episode text (1-10000 chars)")] = None,
        observation_type: Opt[str | None, Field(description="fact (default), decision, lesson, preference, context, tool_usage, error, solution")] = None,
        source: Opt[str | None, Field(description="agent (default), user, error_detection, consolidation, inference")] = None,
        observation_id: Opt[str | None, Field(description="Observation id, for action=delete")] = None,
        id: Opt[str | None, Field(description="Alias of observation_id")] = None,
        observations: Opt[list[dict[str, Any]] | None, Field(description="batch_add: up to 100 items {entity_name, content, observation_type?, source?, created_at?}; returns ids in input order")] = None,
        actors: Opt[list[str] | None, Field(description="episode_add: who took part")] = None,
        artifacts: Opt[list[str] | None, Field(description="episode_add: files, PRs, links involved")] = None,
        created_at: Opt[str | None, Field(description="ISO 8601 time the fact was true/recorded (to import history); default now")] = None,
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        if action == "add":
            return rt.call(ctx, lambda m, c: observation_svc.add(
                m, c, entity_name=entity_name, content=content, observation_type=observation_type,
                source=source, created_at=created_at, allow_secret=allow_secret))
        if action == "batch_add":
            return rt.call(ctx, observation_svc.batch_add, observations, allow_secret)
        if action == "delete":
            return rt.call(ctx, observation_svc.delete, observation_id or id)
        if action == "list":
            return rt.call(ctx, observation_svc.list_for, entity_name)
        if action == "episode_add":
            return rt.call(ctx, lambda m, c: episode_svc.add(
                m, c, entity_name=entity_name, content=content, actors=actors, artifacts=artifacts,
                allow_secret=allow_secret))
        if action == "episode_list":
            return rt.call(ctx, episode_svc.list_for, entity_name)
        return rt.call(ctx, episode_svc.timeline, entity_name)

    def cuba_puente(
        action: Annotated[Literal["create", "delete", "traverse", "infer"], Field(description="What to do")],
        from_entity: Opt[str | None, Field(description="Source entity (create/delete)")] = None,
        to_entity: Opt[str | None, Field(description="Target entity (create/delete)")] = None,
        relation_type: Opt[str | None, Field(description="uses, causes, implements, depends_on or related_to (default)")] = None,
        bidirectional: Opt[bool, Field(description="Edge can be walked both ways")] = False,
        start_entity: Opt[str | None, Field(description="Where a traversal starts (traverse/infer)")] = None,
        max_depth: Opt[int | None, Field(description="Hops to walk, default 3, at most 5")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        if action == "create":
            return rt.call(ctx, relation_svc.create, from_entity, to_entity, relation_type, bidirectional)
        if action == "delete":
            return rt.call(ctx, relation_svc.delete, from_entity, to_entity, relation_type)
        if action == "traverse":
            return rt.call(ctx, relation_svc.traverse, start_entity, max_depth)
        return rt.call(ctx, relation_svc.infer, start_entity, max_depth)

    def cuba_faro(
        query: Annotated[str, Field(description="Search text")],
        mode: Opt[Literal["hybrid", "verify"], Field(description="hybrid (default) searches; verify checks a claim")] = "hybrid",
        scope: Opt[Literal["all", "entities", "observations", "errors"], Field(description="Where to search (default: all)")] = "all",
        limit: Opt[int, Field(ge=1, le=50, description="Max results (default 10, 1-50)")] = 10,
        before: Opt[str | None, Field(description="RFC 3339 date-time: only rows created before it")] = None,
        after: Opt[str | None, Field(description="RFC 3339 date-time: only rows created after it")] = None,
        format: Opt[Literal["compact", "verbose"], Field(description="compact (default): keys id, e=entity, c=content, s=score, t=type, i=importance, d=date; verbose: full keys and per-branch scores")] = "compact",
        tags: Opt[str | None, Field(description="Also return observations carrying this tag (comma-separated for several)")] = None,
        max_tokens: Opt[int, Field(ge=1, description="Token budget for results (default 5000), counted exactly in cl100k_base")] = 5000,
        enable_bm25: Opt[bool, Field(description="Use the BM25 branch (default true)")] = True,
        diversify: Opt[bool, Field(description="MMR pass that penalises near-duplicates among the top results (default false)")] = False,
        mmr_lambda: Opt[float, Field(ge=0, le=1, description="MMR balance: 1.0 pure relevance, 0.0 pure diversity (default 0.7)")] = 0.7,
        abstain_ood: Opt[bool, Field(description="Return no results (with abstain_reason) when the query is out of this memory's distribution (Mahalanobis distance; default false)")] = False,
        ood_threshold: Opt[float | None, Field(ge=0, description="Mahalanobis threshold; default CUBA_OOD_THRESHOLD, else the value from `cuba-memorys calibrate`; without any, no abstention (the sqrt(chi2_0.99(d)) ~21.25 default refuses every question with e5 embeddings) and ood_skipped_reason says so")] = None,
        rerank: Opt[bool | None, Field(description="Cross-encoder rerank of the top 50 when a reranker is configured; default on only in CUBA_MODE=completo")] = None,
        associative: Opt[bool, Field(description="Add observations of entities graph-connected to the ones the query names (spreading activation; only adds hits; default false)")] = False,
        include_unscoped: Opt[bool, Field(description="With a project active, also show rows that belong to no project (default true)")] = True,
        track_access: Opt[bool, Field(description="Count this search as an access of the returned rows (default true)")] = True,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        judges = sampling_judge(ctx) if mode == "verify" else None
        return rt.call(ctx, lambda m, c: search_svc.faro(
            m, c, judges=m.judge_chain(judges) if mode == "verify" else None, query=query, mode=mode, scope=scope, limit=limit, before=before, after=after,
            format=format, tags=tags, max_tokens=max_tokens, enable_bm25=enable_bm25,
            diversify=diversify, mmr_lambda=mmr_lambda, abstain_ood=abstain_ood,
            ood_threshold=ood_threshold, rerank=rerank, associative=associative,
            include_unscoped=include_unscoped, track_access=track_access))

    def cuba_proyecto(
        action: Annotated[Literal["list", "current", "switch", "stats", "rename", "merge"], Field(description="What to do")],
        name: Opt[str | None, Field(description="switch: project to switch to (created if new; '*' clears the active"
                                                " project); stats: project to count (default the active one);"
                                                " rename/merge: the project renamed / merged away")] = None,
        to: Opt[str | None, Field(description="rename: the new name (must be free); merge: the existing project"
                                              " that receives every row")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        if action == "list":
            return rt.call(ctx, project_svc.list_all)
        if action == "current":
            return rt.call(ctx, project_svc.current)
        if action == "stats":
            return rt.call(ctx, project_svc.stats, name)
        if action in ("rename", "merge"):
            chosen = project_svc.rename if action == "rename" else project_svc.merge
            return rt.call(ctx, lambda m, c: chosen(m, c, _need("name", name, action), _need("to", to, action)))
        return rt.call(ctx, project_svc.switch, name)

    read_only = ToolAnnotations(readOnlyHint=True)
    may_delete = ToolAnnotations(readOnlyHint=False, destructiveHint=True)
    return [
        ("cuba_alma", cuba_alma, "Entities of the knowledge graph: create, update (rename), delete"
         " (cascades to observations, episodes and relations) or get one with its observations and relations.",
         may_delete),
        ("cuba_cronica", cuba_cronica, "Write what you learn: add an observation (auto-creates the entity;"
         " near-duplicates are not stored twice), batch_add up to 100 (ids returned in input order),"
         " list, delete; episodes (episode_add/episode_list) and an entity's timeline.", may_delete),
        ("cuba_puente", cuba_puente, "Relations between entities: create (repeating strengthens the edge),"
         " delete, traverse the graph (up to 5 hops) or infer transitive connections.", may_delete),
        ("cuba_faro", cuba_faro, "Search memory BEFORE answering, to ground what you say. Hybrid search"
         " (full-text + BM25 + vectors, score fusion) over entities, observations, episodes and errors,"
         " scoped to the active project; optional time window, tags and an exact token budget."
         " mode=verify checks a claim against stored evidence (verified/partial/weak/unknown/contradicted).",
         read_only),
        ("cuba_proyecto", cuba_proyecto, "Projects: list, current, switch, stats (rows per kind), rename,"
         " merge (moves every row of one project into another and deletes it; same-name entities and"
         " recipes are combined). Writes are tagged with the active project; reads see it plus rows"
         " without a project.", may_delete),
    ]
