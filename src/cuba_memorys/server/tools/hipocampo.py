"""search_hipocampo: Hipocampo's search tool, served under its own name (it is not a cuba_*
tool, so it has no memory_* alias). The signature is its input schema, with the parameters,
defaults and ranges of Hipocampo's listing; validation and behaviour live in
services/hipocampo.py, so the service and the tool reject bad input identically.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from cuba_memorys.server.runtime import Runtime
from cuba_memorys.services.search import hipocampo

Opt = Annotated

DESCRIPTION = """Search memory with structured + semantic lanes (read-only: changes nothing, counts no access).

Default output is compact text, one line per hit: #id, relevance, code · date · nivel/type, a short snippet and [why it matched].

Query syntax (optional, mixed with free text in any order):
  code:auth_service            entity name, exact
  category:infra,ci            tags, any of (also categories:)
  nivel:episodica|semantica|automatica   episodes | observations | procedures (none stored yet)
  type:decision                memory type (event→context, profile→preference, …)
  id:4039  #4039  id:<uuid>    numeric ids are a row's seq (shown as #N)
  after:2026-10-01  since:7d  before:today   (also Nh, Nw, yesterday; dates are UTC midnight)
  "exact phrase"               must occur in the text (case and accents ignored)
Unknown key:value pairs (URLs, std::vector) stay free text. The same filters exist as arguments;
explicit arguments win over the query syntax. query may be empty when filters are given.
An empty result means the search was valid and found nothing (not an error)."""


def build(rt: Runtime) -> list[tuple[str, Any, str, ToolAnnotations]]:
    def search_hipocampo(
        query: Opt[str, Field(description="Free text and/or filters in the query syntax; may be empty when filters are given")] = "",
        session_id: Opt[str, Field(description="Only rows recorded in this session")] = "",
        rerank: Opt[str | bool, Field(description="auto (default: no reranker is configured, so none runs), always (fused order plus a note saying no reranker is configured) or never; true≈always, false≈never")] = "auto",
        k: Opt[int, Field(description="Results to return (1-20, default 5)")] = 5,
        offset: Opt[int, Field(description="Pagination, 0-based (0-1000)")] = 0,
        code: Opt[str, Field(description="Exact code = entity name")] = "",
        categories: Opt[list[str] | None, Field(description="Categories = tags; a row matches if it carries any of them")] = None,
        nivel: Opt[str, Field(description="episodica (episodes) | semantica (observations) | automatica (procedures: none stored yet)")] = "",
        memory_type: Opt[str, Field(description="fact, decision, lesson, preference, context, tool_usage, error, solution; also event→context, profile→preference, insight/learning→lesson, fix→solution, bug→error, tool→tool_usage, note→fact")] = "",
        ids: Opt[list[int | str] | None, Field(description="Row ids: numbers (a row's seq, shown as #N) or UUID strings")] = None,
        created_after: Opt[str, Field(description="ISO date (YYYY-MM-DD) or date-time, Nh/Nd/Nw ago (e.g. 7d), today, yesterday")] = "",
        created_before: Opt[str, Field(description="ISO date or date-time, Nh/Nd/Nw ago, today, yesterday")] = "",
        include_pending: Opt[bool, Field(description="false hides rows whose embedding is not stored yet")] = True,
        rerank_top_k: Opt[int, Field(description="How many results a reranker would re-score (3-20, default 8)")] = 8,
        rerank_budget_ms: Opt[int, Field(description="Time budget of a re-rank (100-5000 ms, default 800)")] = 800,
        format: Opt[str, Field(description="compact (default, one line per hit), full (longer text) or json")] = "compact",
        snippet_chars: Opt[int, Field(description="Snippet length in characters (80-2000, default 300)")] = 300,
        include_scores: Opt[bool, Field(description="Show the numeric fused score in compact output")] = False,
        explain: Opt[bool, Field(description="Per-result channel breakdown: vec (vector), lex (text, BM25), struct (filters met)")] = False,
        ctx: Context | None = None,
    ) -> str:
        return rt.call(ctx, lambda m, c: hipocampo.search(
            m, c, query=query, session_id=session_id, rerank=rerank, k=k, offset=offset, code=code,
            categories=categories, nivel=nivel, memory_type=memory_type, ids=ids,
            created_after=created_after, created_before=created_before, include_pending=include_pending,
            rerank_top_k=rerank_top_k, rerank_budget_ms=rerank_budget_ms, format=format,
            snippet_chars=snippet_chars, include_scores=include_scores, explain=explain))

    return [("search_hipocampo", search_hipocampo, DESCRIPTION, ToolAnnotations(readOnlyHint=True))]
