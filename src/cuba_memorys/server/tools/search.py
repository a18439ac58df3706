"""Search tools: cuba_faro (hybrid search; mode=verify checks a claim) and search_hipocampo
(Hipocampo's structured + semantic search, under its own name, so it has no memory_* alias).

Signatures only: each is the tool's input schema. The catalogue routes cuba_faro by ``mode``
and search_hipocampo to its one service (services/search/).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from typing import Annotated as Opt  # readability: Opt[type, Field(...)] marks an optional parameter

from mcp.server.mcpserver import Context
from pydantic import Field

HIPOCAMPO_DESCRIPTION = """Search memory with structured + semantic lanes (read-only: changes nothing, counts no access).

Default output is compact text, one line per hit: #id, relevance, code · date · nivel/type, a short snippet and [why it matched].

Query syntax (optional, mixed with free text in any order):
  code:auth_service            entity name, exact
  category:infra,ci            tags, any of (also categories:)
  nivel:episodica|semantica|automatica   episodes | observations | procedures (kept by cuba_receta, not searched here)
  type:decision                memory type (event→context, profile→preference, …)
  id:4039  #4039  id:<uuid>    numeric ids are a row's seq (shown as #N)
  after:2026-10-01  since:7d  before:today   (also Nh, Nw, yesterday; dates are UTC midnight)
  "exact phrase"               must occur in the text (case and accents ignored)
Unknown key:value pairs (URLs, std::vector) stay free text. The same filters exist as arguments;
explicit arguments win over the query syntax. query may be empty when filters are given.
An empty result means the search was valid and found nothing (not an error)."""  # noqa: E501 - shown to agents as written


def cuba_faro(
    query: Annotated[str, Field(description="Search text (mode=verify: the claim to check)")],
    mode: Opt[Literal["hybrid", "verify"], Field(description="hybrid searches; verify checks a claim")] = "hybrid",
    scope: Opt[Literal["all", "entities", "observations", "errors"], Field(description="Where to search")] = "all",
    limit: Opt[int, Field(description="Max results (clamped to 1-50)")] = 10,
    before: Opt[str | None, Field(description="RFC 3339 date-time: only rows created before it")] = None,
    after: Opt[str | None, Field(description="RFC 3339 date-time: only rows created after it")] = None,
    as_of: Opt[str | None, Field(description="RFC 3339 date-time: answer with what the memory held true then")]
    = None,
    format: Opt[Literal["compact", "verbose"], Field(
        description="compact: keys id, e=entity, c=content, s=score, t=type, i=importance, d=date;"
                    " verbose: full keys and per-branch scores; mode=verify: the one or two rows that"
                    " decided / every row judged")] = "compact",
    tags: Opt[str | None, Field(description="Also return observations with this tag (comma-separated for"
                                            " several)")] = None,
    max_tokens: Opt[int, Field(description="Token budget for results, counted exactly in cl100k_base (clamped to"
                                           " 1-1000000)")] = 5000,
    enable_bm25: Opt[bool, Field(description="Use the BM25 branch")] = True,
    diversify: Opt[bool, Field(description="MMR pass that penalises near-duplicates among the top results")] = False,
    mmr_lambda: Opt[float, Field(description="MMR balance: 1.0 pure relevance, 0.0 pure diversity (clamped to"
                                             " 0-1)")] = 0.7,
    abstain_ood: Opt[bool, Field(description="Return no results (abstain_reason) for a query outside this"
                                             " memory's distribution")] = False,
    ood_threshold: Opt[float | None, Field(ge=0, description="Mahalanobis threshold; default CUBA_OOD_THRESHOLD,"
                                                             " else `cuba-memorys calibrate`'s")] = None,
    rerank: Opt[bool | None, Field(description="true: the configured reranker over the top 50; false: none;"
                                               " omitted: the offline reranker over the top 10 (50 in"
                                               " CUBA_MODE=completo)")] = None,
    associative: Opt[bool, Field(description="Also observations of entities linked in the graph to those the"
                                             " query names")] = False,
    include_unscoped: Opt[bool, Field(description="With a project active, also show rows that belong to no"
                                                  " project")] = False,
    track_access: Opt[bool, Field(description="Count this search as an access of the returned rows")] = True,
    context: Opt[dict[str, Any] | None, Field(description="The change at hand, {files?: [paths], diff?: unified"
                                                          " diff}: memories anchored to that code rank higher")]
    = None,
    ctx: Context | None = None,
) -> dict[str, Any]: ...


def search_hipocampo(
    query: Opt[str, Field(description="Free text and/or filters in the query syntax; may be empty when filters are"
                                      " given")] = "",
    session_id: Opt[str, Field(description="Only rows recorded in this session")] = "",
    rerank: Opt[str | bool, Field(description="auto (rerank near ties when a reranker is configured), always or"
                                              " never; true≈always, false≈never")] = "auto",
    k: Opt[int, Field(description="Results to return (1-20)")] = 5,
    offset: Opt[int, Field(description="Pagination, 0-based (0-1000)")] = 0,
    code: Opt[str, Field(description="Exact code = entity name")] = "",
    categories: Opt[list[str] | None, Field(description="Categories = tags; a row matches if it carries any of"
                                                        " them")] = None,
    nivel: Opt[str, Field(description="episodica (episodes) | semantica (observations) | automatica (procedural"
                                      " memory: kept by cuba_receta, not searched here)")] = "",
    memory_type: Opt[str, Field(description="fact, decision, lesson, preference, context, tool_usage, error,"
                                            " solution; also event→context, profile→preference,"
                                            " insight/learning→lesson, fix→solution, bug→error, tool→tool_usage,"
                                            " note→fact")] = "",
    ids: Opt[list[int | str] | None, Field(description="Row ids: numbers (a row's seq, shown as #N) or UUID"
                                                       " strings")] = None,
    created_after: Opt[str, Field(description="ISO date (YYYY-MM-DD) or date-time, Nh/Nd/Nw ago (e.g. 7d), today,"
                                              " yesterday")] = "",
    created_before: Opt[str, Field(description="ISO date or date-time, Nh/Nd/Nw ago, today, yesterday")] = "",
    include_pending: Opt[bool, Field(description="false hides rows whose embedding is not stored yet")] = True,
    rerank_top_k: Opt[int, Field(description="How many results a rerank re-scores (3-20)")] = 8,
    rerank_budget_ms: Opt[int, Field(description="Time budget of a rerank (100-5000 ms)")] = 800,
    format: Opt[str, Field(description="compact (one line per hit), full (longer text) or json")] = "compact",
    snippet_chars: Opt[int, Field(description="Snippet length in characters (80-2000)")] = 300,
    include_scores: Opt[bool, Field(description="Show the numeric fused score in compact output")] = False,
    explain: Opt[bool, Field(description="Per-result channel breakdown: vec (vector), lex (text, BM25), struct"
                                         " (filters met)")] = False,
    ctx: Context | None = None,
) -> str: ...
