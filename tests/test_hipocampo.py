"""search_hipocampo (service and MCP stdio), the SearchFilter fields it relies on, and the
query mini-syntax inside cuba_faro."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import numpy as np
import pytest

from conftest import settings_for
from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import NewObservation, SearchFilter
from cuba_memorys.services.graph import episodes
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.services.search import hipocampo
from mcp_helpers import run_stdio

NOW = datetime(2026, 10, 15, 12, tzinfo=UTC)
LONG = ("The frontend build has many steps: lint with eslint, type-check with tsc, bundle with Vite,"
        " run unit tests with Vitest, upload source maps, compress assets, and finally publish the"
        " component catalogue with Storybook to the internal docs site.")
ROWS = [  # (entity, content, type, created_at)
    ("ci", "CI runs pytest with coverage on every push", "decision", "2026-10-14T09:00:00Z"),
    ("ci", "Nightly builds publish wheels to the internal package index", "fact", "2026-09-01T09:00:00Z"),
    ("packaging", "Wheels are built with hatchling and uploaded by the release job", "fact", "2026-10-10T09:00:00Z"),
    ("auth", "The team prefers short-lived sessions of 30 minutes", "preference", "2026-10-12T09:00:00Z"),
    ("auth", "Configuración: el token de sesión caduca a los 30 minutos", "context", "2026-08-01T09:00:00Z"),
    ("frontend", "The dashboard is a React app built with Vite", "fact", "2026-10-13T09:00:00Z"),
    ("frontend", LONG, "fact", "2026-07-01T09:00:00Z"),
]
PENDING = "Wheel cache lives in the release bucket"
SESSION_ROW = "Release checklist lives in docs/release.md"
EPISODE = "We debugged the flaky CI runner together with the release team"


@pytest.fixture(scope="module")
def mem(module_location):
    """One store shared by these tests: search_hipocampo only reads, and embedding the rows
    once keeps the file fast."""
    settings = settings_for(module_location)
    memory = Memory.open(settings)
    observations.batch_add(memory, None, [{"entity_name": e, "content": c, "observation_type": t, "created_at": d}
                                          for e, c, t, d in ROWS])
    assert memory.wait_for_embeddings(120)  # batch_add's vectors come from the background queue
    episodes.add(memory, None, entity_name="ci", content=EPISODE)
    packaging = memory.store.get_entity("packaging", memory.scope(None))
    memory.store.add_observation(NewObservation(  # no embedding yet: a pending row
        entity_id=packaging.id, content=PENDING, tags=["wheels"], created_at="2026-10-11T09:00:00+00:00"))
    memory.store._exec("INSERT INTO sessions(id, name, started_at) VALUES ('sess-1', 'release', ?)",
                       ("2026-10-09T08:00:00+00:00",))
    (vec,) = memory.embed_passages([("ci", "concept", SESSION_ROW)])
    memory.store.add_observation(NewObservation(
        entity_id=packaging.id, content=SESSION_ROW, session_id="sess-1", created_at="2026-10-09T09:00:00+00:00",
        embedding=np.asarray(vec, dtype=np.float32).tobytes(), embedding_model=memory.embedder.name))
    yield memory
    memory.close()


def hs(mem, **kwargs) -> str:
    return hipocampo.search(mem, None, now=NOW, **kwargs)


def js(mem, **kwargs) -> dict:
    return json.loads(hs(mem, format="json", **kwargs))


def texts(mem, **kwargs) -> list[str]:
    return [r["snippet"] for r in js(mem, snippet_chars=2000, k=20, **kwargs)["results"]]


# -- ranking and output ------------------------------------------------------------------------
def test_text_search_shares_cuba_faros_ranking(mem):
    result = js(mem, query="how are wheels built")
    faro = search.faro(mem, None, query="how are wheels built", scope="observations", track_access=False)
    assert result["results"][0]["snippet"] == ROWS[2][1] == faro["results"][0]["c"]
    assert result["ranking"] == "hybrid" and result["results"][0]["relevance"] == 1.0


def test_compact_is_one_line_per_hit_with_id_relevance_code_date_nivel_snippet_and_reason(mem):
    lines = hs(mem, query="wheels built", k=3).splitlines()
    assert lines[0].startswith("search_hipocampo: results 1-3") and "more: offset=3" in lines[0]
    hits = lines[1:4]
    assert [line.split(".")[0] for line in hits] == ["1", "2", "3"] and len(lines) == 4
    top = hits[0]
    assert top.startswith("1. #") and "rel 1.00" in top and "· packaging · 2026-10-10 · semantica/fact —" in top
    assert top.endswith("[words+meaning]") and "score" not in top
    assert re.search(r" score \d+\.\d+ ", hs(mem, query="wheels built", k=1, include_scores=True))


def test_full_and_json_formats_expose_uuid_and_seq(mem):
    full = hs(mem, query="pytest coverage", k=1, format="full")
    data = js(mem, query="pytest coverage", k=1)
    row = data["results"][0]
    assert isinstance(row["seq"], int) and len(row["id"]) == 36
    assert f"[1] #{row['seq']} · semantica · decision · code ci" in full and f"id {row['id']}" in full
    assert "matched: words" in full and ROWS[0][1] in full
    by_seq = js(mem, ids=[row["seq"]], nivel="semantica")["results"]
    by_uuid = js(mem, ids=[row["id"]])["results"]
    assert [r["id"] for r in by_seq] == [r["id"] for r in by_uuid] == [row["id"]]
    assert [r["id"] for r in js(mem, query=f"#{row['seq']} nivel:semantica")["results"]] == [row["id"]]


def test_snippet_chars_bounds_the_snippet_and_centres_on_the_match(mem):
    (row,) = js(mem, query="storybook catalogue", k=1, snippet_chars=80)["results"]
    assert len(row["snippet"]) <= 80 and "Storybook" in row["snippet"] and row["snippet"].startswith("…")
    assert js(mem, query="storybook catalogue", k=1, snippet_chars=2000)["results"][0]["snippet"] == LONG


# -- filters (arguments and query syntax) -------------------------------------------------------
@pytest.mark.parametrize("kwargs, expected", [
    ({"code": "auth"}, {ROWS[3][1], ROWS[4][1]}),
    ({"query": "code:auth"}, {ROWS[3][1], ROWS[4][1]}),
    ({"categories": ["wheels"]}, {ROWS[1][1], ROWS[2][1], PENDING}),
    ({"query": "category:Wheels,nothing"}, {ROWS[1][1], ROWS[2][1], PENDING}),
    ({"nivel": "episodica"}, {EPISODE}),
    ({"query": "nivel:episódica"}, {EPISODE}),
    ({"memory_type": "decision"}, {ROWS[0][1]}),
    ({"query": "type:profile"}, {ROWS[3][1]}),  # Hipocampo's name → preference
    ({"memory_type": "event"}, {ROWS[4][1]}),  # → context
    ({"created_after": "2026-10-12", "created_before": "2026-10-14", "nivel": "semantica"}, {ROWS[3][1], ROWS[5][1]}),
    ({"query": "since:3d nivel:semantica"}, {ROWS[0][1], ROWS[5][1]}),
    ({"query": "before:2026-09-02 nivel:semantica"}, {ROWS[1][1], ROWS[4][1], LONG}),
    ({"created_after": "yesterday", "nivel": "semantica"}, {ROWS[0][1]}),
    ({"session_id": "sess-1"}, {SESSION_ROW}),
    ({"query": '"TOKEN de sesion"'}, {ROWS[4][1]}),  # phrase: case and accents ignored
    ({"query": '"sessions 30"'}, set()),  # whole words in order, not scattered
])
def test_each_filter_alone_lists_exactly_its_rows(mem, kwargs, expected):
    assert set(texts(mem, **kwargs)) == expected


def test_filters_combine_with_free_text(mem):
    found = texts(mem, query="uploaded by the release job code:packaging type:fact")
    assert found[0] == ROWS[2][1] and set(found) <= {ROWS[2][1], PENDING, SESSION_ROW}
    assert texts(mem, query="minutes", nivel="semantica", code="auth", memory_type="preference") == [ROWS[3][1]]


def test_include_pending_false_hides_rows_without_embedding(mem):
    assert PENDING in texts(mem, query="wheel cache bucket")
    assert PENDING not in texts(mem, query="wheel cache bucket", include_pending=False)
    assert set(texts(mem, categories=["wheels"], include_pending=False)) == {ROWS[1][1], ROWS[2][1]}


def test_nivel_automatica_is_an_honest_empty_result(mem):
    out = hs(mem, nivel="automatica")
    # Procedures are stored (cuba_receta): the note says where they are, not that they do not exist.
    assert "valid but found nothing" in out and "kept as recipes by cuba_receta" in out
    assert "not stored" not in out
    mixed = js(mem, query="nivel:automatica,episodica")
    assert [r["snippet"] for r in mixed["results"]] == [EPISODE] and mixed["notes"]


def test_explicit_arguments_win_over_the_query_syntax(mem):
    data = js(mem, query="code:ci minutes", code="auth", k=20)
    assert {r["code"] for r in data["results"]} == {"auth"}
    assert any("code: in the query was ignored" in n for n in data["notes"])
    late = js(mem, query="after:2026-10-13 nivel:semantica", created_after="2026-10-12", k=20)
    assert {r["snippet"] for r in late["results"]} == {ROWS[0][1], ROWS[3][1], ROWS[5][1]}
    assert js(mem, query="nivel:episodica", nivel="semantica", code="ci")["results"][0]["nivel"] == "semantica"


def test_empty_result_is_a_message_not_an_error(mem):
    # Vectors always rank the nearest rows, so "nothing" means the filters left no row.
    assert "the search was valid but found nothing" in hs(mem, query="zebra giraffe", code="nobody")
    data = js(mem, query='wheels "purple zebra"')
    assert data["count"] == 0 and data["results"] == [] and "valid but found nothing" in data["message"]


def test_pagination_with_offset(mem):
    query = "release wheels sessions dashboard pytest"
    whole = [r["id"] for r in js(mem, query=query, k=6)["results"]]
    pages = [js(mem, query=query, k=2, offset=o) for o in (0, 2, 4)]
    assert [r["id"] for p in pages for r in p["results"]] == whole
    assert [r["rank"] for r in pages[1]["results"]] == [3, 4]
    assert pages[0]["has_more"] and pages[0]["next_offset"] == 2
    assert "no results at offset 900" in hs(mem, query=query, offset=900)


def test_explain_breaks_each_result_down_by_channel(mem):
    row = js(mem, query="pytest coverage", code="ci", explain=True, k=1)["results"][0]
    assert set(row["explain"]) == {"vec", "lex", "struct"}
    assert row["explain"]["vec"] > 0 and row["explain"]["lex"]["bm25"] > 0 and row["explain"]["struct"] == ["code=ci"]
    lines = hs(mem, query="pytest coverage", code="ci", explain=True, k=1).splitlines()
    assert lines[2].startswith("   explain: vec 0.") and "| struct code=ci" in lines[2]
    assert "explain" not in js(mem, query="pytest coverage", k=1)["results"][0]
    listed = js(mem, code="ci", explain=True)["results"][0]["explain"]
    assert listed["vec"] is None and listed["struct"] == ["code=ci"]


@pytest.mark.parametrize("rerank, noted", [("always", True), (True, True), ("auto", False),
                                           ("never", False), (False, False), ("AUTO", False)])
def test_rerank_never_pretends(mem, rerank, noted):
    data = js(mem, query="wheels", rerank=rerank)
    assert data["rerank"]["applied"] is False
    assert any("not applied" in n and "no reranker model" in n for n in data["notes"]) is noted
    plain = js(mem, query="wheels", rerank="never")
    assert [r["id"] for r in data["results"]] == [r["id"] for r in plain["results"]]


def test_search_is_read_only(mem):
    row = js(mem, query="pytest coverage", k=1)["results"][0]
    before = mem.store.get_observation(row["id"], mem.scope(None)).access_count
    hs(mem, query="pytest coverage")
    hs(mem, code="ci")
    assert mem.store.get_observation(row["id"], mem.scope(None)).access_count == before


@pytest.mark.parametrize("kwargs", [
    {"k": 1}, {"k": 20}, {"rerank_top_k": 3}, {"rerank_top_k": 20}, {"rerank_budget_ms": 100},
    {"rerank_budget_ms": 5000}, {"snippet_chars": 80}, {"snippet_chars": 2000}, {"offset": 1000},
])
def test_bounds_are_inclusive(mem, kwargs):
    assert hs(mem, query="wheels", **kwargs).startswith("search_hipocampo:")


BAD = [
    ({"k": 0}, "k"), ({"k": 21}, "k"), ({"k": "5"}, "k"), ({"k": True}, "k"),
    ({"offset": -1}, "offset"), ({"offset": 1001}, "offset"),
    ({"rerank_top_k": 2}, "rerank_top_k"), ({"rerank_top_k": 21}, "rerank_top_k"),
    ({"rerank_budget_ms": 99}, "rerank_budget_ms"), ({"rerank_budget_ms": 5001}, "rerank_budget_ms"),
    ({"snippet_chars": 79}, "snippet_chars"), ({"snippet_chars": 2001}, "snippet_chars"),
    ({"created_after": "soon"}, "created_after"), ({"created_after": "2026-13-01"}, "created_after"),
    ({"created_before": "7 days"}, "created_before"), ({"created_before": 7}, "created_before"),
    ({"nivel": "procedural"}, "nivel"), ({"format": "xml"}, "format"), ({"rerank": "sometimes"}, "rerank"),
    ({"rerank": 1}, "rerank"), ({"memory_type": "gossip"}, "memory_type"), ({"ids": ["abc"]}, "ids"),
    ({"ids": [-1]}, "ids"), ({"ids": "12"}, "ids"), ({"categories": [1]}, "categories"),
    ({"include_pending": "yes"}, "include_pending"), ({"include_scores": 1}, "include_scores"),
    ({"explain": "no"}, "explain"), ({"code": "x" * 201}, "code"), ({"query": 5}, "query"),
    ({"query": "after:soon"}, "query"), ({"query": "type:gossip"}, "query"), ({"query": "   "}, "query"),
    ({"query": "", "include_pending": False}, "query"), ({"limit": 5}, "limit"),
]


@pytest.mark.parametrize("kwargs, param", BAD)
def test_bad_input_is_a_clear_error_naming_the_parameter(mem, kwargs, param):
    args = {"query": "wheels", **kwargs}
    with pytest.raises(InvalidInput) as err:
        hs(mem, **args)
    assert err.value.param == param and str(err.value).startswith(param)


# -- the SearchFilter fields in the store --------------------------------------------------------
def test_store_filters_per_row_kind(mem):
    store, scope = mem.store, mem.scope(None)
    entity = store.text_candidates("entity", "auth", 10, SearchFilter(scope=scope, entity_names=("auth",)))
    assert len(entity) == 1  # entity_names applies to entities by name
    assert store.text_candidates("entity", "auth", 10, SearchFilter(observation_types=("fact",))) == []
    assert store.text_candidates("error", "x", 10, SearchFilter(entity_names=("auth",))) == []
    assert store.text_candidates("observation", "wheels", 10, SearchFilter(kinds=("episode",))) == []
    listed = store.tag_candidates((), 50, SearchFilter(entity_names=("ci",)))
    assert {h.kind for h in listed} == {"entity", "observation", "episode"}
    newest = store.tag_candidates((), 50, SearchFilter(kinds=("observation",)))
    dates = [store.fetch_rows("observation", [h.id])[h.id]["created_at"] for h in newest]
    assert dates == sorted(dates, reverse=True)
    assert store.tag_candidates(("wheels",), 50, SearchFilter()) != []  # tags keep their old meaning


# -- cuba_faro understands the same syntax -------------------------------------------------------
def _faro_texts(result) -> list[str]:
    return [r["c"] for r in result["results"] if r["t"] != "entity"]


def test_faro_applies_query_filters_and_searches_the_rest(mem):
    result = search.faro(mem, None, query="wheels code:packaging", track_access=False)
    assert result["query"] == "wheels code:packaging"  # echoed as given
    assert result["query_syntax"]["searched_text"] == "wheels"
    assert {r["e"] for r in result["results"]} == {"packaging"}
    assert _faro_texts(search.faro(mem, None, query='sessions "30 minutes" type:preference',
                                   track_access=False)) == [ROWS[3][1]]


def test_faro_explicit_arguments_win(mem):
    late = search.faro(mem, None, query="builds wheels after:2026-10-05", scope="observations", track_access=False)
    assert ROWS[1][1] not in _faro_texts(late)
    wide = search.faro(mem, None, query="builds wheels after:2026-10-05", after="2026-08-01T00:00:00Z",
                       scope="observations", track_access=False)
    assert ROWS[1][1] in _faro_texts(wide)
    assert "after: in the query was ignored" in wide["query_syntax"]["notes"][0]
    constrained = _faro_texts(search.faro(mem, None, query="zzz category:hatchling", track_access=False))
    assert constrained == [ROWS[2][1]]  # category: constrains (any of the tags)
    tagged = search.faro(mem, None, query="zzz category:hatchling", tags="nightly", track_access=False)
    assert ROWS[1][1] in _faro_texts(tagged) and ROWS[0][1] in _faro_texts(tagged)  # tags merge, no constraint
    assert "category: in the query was ignored" in tagged["query_syntax"]["notes"][0]


def test_faro_plain_queries_are_unchanged_and_filter_only_queries_are_refused(mem):
    plain = search.faro(mem, None, query="how are wheels built", track_access=False)
    assert "query_syntax" not in plain and plain["query"] == "how are wheels built"
    with pytest.raises(InvalidInput, match="query"):
        search.faro(mem, None, query="code:ci since:7d")
    with pytest.raises(InvalidInput, match="query"):
        search.faro(mem, None, query="wheels nivel:robotic")
    none = search.faro(mem, None, query="ci nivel:automatica", track_access=False)
    assert none["results"] == [] and "procedural" in none["query_syntax"]["notes"][0]


# -- over MCP stdio, as an agent calls it --------------------------------------------------------
STDIO_BAD = [({"k": 0}, "k"), ({"k": 21}, "k"), ({"rerank_top_k": 2}, "rerank_top_k"),
             ({"rerank_top_k": 21}, "rerank_top_k"), ({"rerank_budget_ms": 99}, "rerank_budget_ms"),
             ({"rerank_budget_ms": 5001}, "rerank_budget_ms"), ({"snippet_chars": 79}, "snippet_chars"),
             ({"snippet_chars": 2001}, "snippet_chars"), ({"created_after": "2026-02-30"}, "created_after"),
             ({"created_before": "later"}, "created_before"), ({"nivel": "muscular"}, "nivel"),
             ({"format": "yaml"}, "format"), ({"rerank": "maybe"}, "rerank"), ({"query": ""}, "query"),
             ({"offset": -1}, "offset"), ({"ids": ["x1"]}, "ids"), ({"query": "since:forever"}, "query")]


def test_search_hipocampo_over_stdio(location):
    async def text(agent, **args) -> str:
        result = await agent.session.call_tool("search_hipocampo", args)
        assert not result.is_error, result.content[0].text
        return result.content[0].text

    async def body(agent):
        tools = {t.name: t for t in (await agent.session.list_tools()).tools}
        await agent.call("cuba_cronica", action="batch_add", observations=[
            {"entity_name": e, "content": c, "observation_type": t, "created_at": d} for e, c, t, d in ROWS])
        out = {"tools": tools, "errors": [(p, await agent.error("search_hipocampo", **{"query": "x", **a}))
                                          for a, p in STDIO_BAD]}
        out["compact"] = await text(agent, query="wheels built code:packaging")
        out["json"] = json.loads(await text(agent, query="wheels", format="json", k=2, offset=1, explain=True,
                                            rerank=True, ids=None))
        out["filters_only"] = await text(agent, nivel="semantica", memory_type="profile")
        out["empty"] = await text(agent, query="zebra", code="nobody")
        out["precedence"] = await text(agent, query="code:ci minutes", code="auth", format="full")
        out["faro"] = await agent.call("cuba_faro", query="dashboard type:fact since:3650d", limit=5)
        return out

    out = run_stdio(location, body)
    tool = out["tools"]["search_hipocampo"]
    assert "memory_hipocampo" not in out["tools"] and tool.annotations.read_only_hint is True
    props = tool.input_schema["properties"]
    assert set(props) == {"query", "session_id", "rerank", "k", "offset", "code", "categories", "nivel",
                          "memory_type", "ids", "created_after", "created_before", "include_pending",
                          "rerank_top_k", "rerank_budget_ms", "format", "snippet_chars", "include_scores", "explain"}
    assert not tool.input_schema.get("required")
    defaults = {name: spec.get("default") for name, spec in props.items()}
    assert defaults == {"query": "", "session_id": "", "rerank": "auto", "k": 5, "offset": 0, "code": "",
                        "categories": None, "nivel": "", "memory_type": "", "ids": None, "created_after": "",
                        "created_before": "", "include_pending": True, "rerank_top_k": 8, "rerank_budget_ms": 800,
                        "format": "compact", "snippet_chars": 300, "include_scores": False, "explain": False}
    for param, message in out["errors"]:
        assert param in message and "internal error" not in message, message
    assert out["compact"].splitlines()[1].startswith("1. #") and "packaging" in out["compact"]
    assert out["json"]["offset"] == 1 and out["json"]["results"][0]["rank"] == 2
    assert set(out["json"]["results"][0]["explain"]) == {"vec", "lex", "struct"}
    assert any("not applied" in n and "no reranker model" in n for n in out["json"]["notes"])
    assert ROWS[3][1] in out["filters_only"] and "newest first" in out["filters_only"]
    assert "the search was valid but found nothing" in out["empty"]
    assert "code auth" in out["precedence"] and "code: in the query was ignored" in out["precedence"]
    assert out["faro"]["results"][0]["c"] == ROWS[5][1] and {r["t"] for r in out["faro"]["results"]} == {"fact"}
