"""cuba_faro hybrid mode and cuba_proyecto scoping, through the service layer."""

from __future__ import annotations

import json

import pytest

from cuba_memorys.errors import InvalidInput
from cuba_memorys.search.tokens import count_tokens
from cuba_memorys.services.graph import projects, relations
from cuba_memorys.services.observations import write as observations
from cuba_memorys.services.search import faro as search
from cuba_memorys.services.search import verify

FACTS = [
    ("api", "The public API is rate limited to 100 requests per minute per key"),
    ("api", "API errors return RFC 7807 problem+json bodies"),
    ("frontend", "The dashboard is a React app built with Vite"),
    ("infra", "Terraform state is stored in an S3 bucket with DynamoDB locking"),
    ("infra", "El clúster de staging se apaga los fines de semana para ahorrar costes"),
]


@pytest.fixture
def filled(memory):
    observations.batch_add(memory, None, [{"entity_name": e, "content": c} for e, c in FACTS])
    assert memory.wait_for_embeddings(120)  # batch_add's vectors come from the background queue
    return memory


def _obs_contents(result):
    return [r["c"] for r in result["results"] if r["t"] != "entity"]


@pytest.mark.parametrize("query, expected", [
    ("how many requests can a client make?", FACTS[0][1]),
    ("what UI framework does the dashboard use", FACTS[2][1]),
    ("where is the terraform state", FACTS[3][1]),
    ("staging cluster shut down on weekends", FACTS[4][1]),  # English query, Spanish memory
])
def test_the_right_memory_comes_first(filled, query, expected):
    assert _obs_contents(search.faro(filled, None, query=query))[0] == expected


def test_compact_and_verbose_rows(filled):
    compact = search.faro(filled, None, query="API rate limit")
    row = compact["results"][0]
    assert {"id", "e", "c", "s", "t", "i"} <= set(row)
    verbose = search.faro(filled, None, query="API rate limit", format="verbose")
    vrow = next(r for r in verbose["results"] if r["type"] == "observation")
    assert {"fused_score", "text_score", "vector_score", "bm25_score", "session_boosted", "content"} <= set(vrow)
    assert vrow["vector_score"] is not None


def test_limit_and_token_budget(filled):
    assert len(search.faro(filled, None, query="API", limit=1)["results"]) == 1
    budget = 150  # a compact row costs ~80 tokens, most of it the UUID
    small = search.faro(filled, None, query="the API and the dashboard and terraform", max_tokens=budget)
    used = sum(count_tokens(json.dumps(r, ensure_ascii=False)) for r in small["results"])
    assert 0 < used <= budget
    full = search.faro(filled, None, query="the API and the dashboard and terraform", max_tokens=100000)
    assert len(full["results"]) > len(small["results"])


def test_time_window(memory):
    observations.batch_add(memory, None, [
        {"entity_name": "log", "content": "Switched CI to GitHub Actions", "created_at": "2023-02-01T00:00:00Z"},
        {"entity_name": "log", "content": "Switched CI runners to ARM machines", "created_at": "2025-02-01T00:00:00Z"},
    ])
    recent = search.faro(memory, None, query="switched CI", after="2024-01-01T00:00:00Z", scope="observations")
    assert _obs_contents(recent) == ["Switched CI runners to ARM machines"]
    old = search.faro(memory, None, query="switched CI", before="2024-01-01T00:00:00+00:00", scope="observations")
    assert _obs_contents(old) == ["Switched CI to GitHub Actions"]


def test_scope_and_tags(filled):
    only_entities = search.faro(filled, None, query="infra api", scope="entities")
    assert only_entities["results"] and all(r["t"] == "entity" for r in only_entities["results"])
    tagged = search.faro(filled, None, query="zzzz unrelated words", tags="terraform")
    assert FACTS[3][1] in _obs_contents(tagged)


def test_graph_context_lists_neighbours(filled):
    relations.create(filled, None, "api", "infra", "depends_on")
    result = search.faro(filled, None, query="API rate limit per key")
    context = {c["entity"]: c["neighbors"] for c in result["graphrag_context"]}
    assert context["api"][0]["name"] == "infra"


@pytest.mark.parametrize("kwargs, param", [
    ({"limit": "5"}, "limit"), ({"limit": 2.5}, "limit"),
    ({"after": "yesterday"}, "after"), ({"before": "2024-13-45"}, "before"),
    ({"scope": "everything"}, "scope"), ({"format": "xml"}, "format"),
    ({"max_tokens": "many"}, "max_tokens"), ({"mode": "dream"}, "mode"),
])
def test_bad_search_input_is_a_clear_error(filled, kwargs, param):
    with pytest.raises(InvalidInput) as err:
        search.faro(filled, None, query="api", **kwargs)
    assert str(err.value).startswith(param)


def test_empty_query_and_verify_mode(filled):
    with pytest.raises(InvalidInput, match="query"):
        search.faro(filled, None, query="  ")
    verdict = verify.verify(filled, None, "the API is rate limited")
    assert verdict["mode"] == "verify" and verdict["grounding"] in ("verified", "partial", "weak", "unknown",
                                                                     "contradicted")


def test_search_counts_access_unless_told_not_to(filled):
    first = search.faro(filled, None, query="terraform state bucket", track_access=False)
    obs_id = next(r["id"] for r in first["results"] if r["t"] != "entity")
    before = filled.store.get_observation(obs_id, filled.scope(None)).access_count
    search.faro(filled, None, query="terraform state bucket")
    filled.settle()  # access counts are written after the answer, on a background thread
    assert filled.store.get_observation(obs_id, filled.scope(None)).access_count == before + 1


def test_project_scoping(memory):
    observations.add(memory, None, entity_name="shared", content="Everyone uses the Python 3.12 toolchain")
    projects.switch(memory, "agent-a", "alpha")
    observations.add(memory, "agent-a", entity_name="alpha-notes", content="Alpha deploys to Fly.io")
    projects.switch(memory, "agent-b", "beta")
    observations.add(memory, "agent-b", entity_name="beta-notes", content="Beta deploys to Heroku")

    def seen(client: str, **kwargs) -> str:
        return " ".join(_obs_contents(search.faro(memory, client, query="deploys toolchain", limit=20, **kwargs)))

    assert "Fly.io" in seen("agent-a") and "Heroku" not in seen("agent-a") and "Python" not in seen("agent-a")
    assert "Heroku" in seen("agent-b") and "Fly.io" not in seen("agent-b")
    # rows of no project join in when asked for (include_unscoped is false by default)
    assert "Python" in seen("agent-a", include_unscoped=True) and "Heroku" not in seen("agent-a", include_unscoped=True)
    assert "Python" in seen("agent-b", include_unscoped=True)
    # no active project: everything is visible
    seen_by_c = " ".join(_obs_contents(search.faro(memory, "agent-c", query="deploys toolchain", limit=20)))
    assert "Fly.io" in seen_by_c and "Heroku" in seen_by_c

    assert projects.current(memory, "agent-a")["project"]["name"] == "alpha"
    assert projects.current(memory, "agent-c")["project"] is None
    names = {p["name"] for p in projects.list_all(memory, None)["projects"]}
    assert names == {"alpha", "beta"}


def test_projects_keep_separate_entities_of_the_same_name(memory):
    projects.switch(memory, "a", "alpha")
    observations.add(memory, "a", entity_name="auth", content="Alpha auth uses sessions")
    projects.switch(memory, "b", "beta")
    observations.add(memory, "b", entity_name="auth", content="Beta auth uses JWT")
    from cuba_memorys.services.graph import entities

    assert [o["content"] for o in entities.get(memory, "a", "auth")["observations"]] == ["Alpha auth uses sessions"]
    assert [o["content"] for o in entities.get(memory, "b", "auth")["observations"]] == ["Beta auth uses JWT"]


def test_switch_to_star_clears_the_project(memory):
    projects.switch(memory, None, "alpha")
    assert projects.switch(memory, None, "*")["project"] is None
    assert projects.current(memory, None)["project"] is None
    with pytest.raises(InvalidInput):
        projects.switch(memory, None, "")


def test_a_huge_word_in_the_query_is_not_an_error(memory):
    from cuba_memorys.services.observations import write as observations

    observations.add(memory, None, entity_name="blob", content="The fixture stores a base64 blob")
    found = search.faro(memory, None, query="blob " + "QUJD" * 1000)  # one 4000-byte "word"
    assert found["results"] and found["results"][0]["c"] in ("The fixture stores a base64 blob", "blob concept")


def test_search_counts_accesses_after_answering(memory):
    """The testing effect: served rows gain an access, written after the answer; track_access
    false leaves them alone."""
    row = observations.add(memory, None, entity_name="deploy", content="Blue-green deploys switch the router")
    count = lambda: memory.store.get_observation(row["id"], memory.scope(None)).access_count  # noqa: E731
    search.faro(memory, None, query="how do deploys switch", scope="observations", track_access=False)
    memory.settle()
    assert count() == 0
    for _ in range(2):
        assert search.faro(memory, None, query="how do deploys switch", scope="observations")["results"]
    memory.settle()
    assert count() == 2


def test_work_after_the_answer_keeps_the_callers_context_and_survives_failures(memory, caplog):
    import contextvars

    project = contextvars.ContextVar("project", default=None)
    seen: list = []

    def fail():
        raise RuntimeError("disk full")

    project.set("alpha")  # as acting_for binds the client's project for row-level security
    memory.after_answer(fail)
    memory.after_answer(lambda: seen.append(project.get()))
    memory.settle()
    assert seen == ["alpha"]
    assert "disk full" in caplog.text


@pytest.mark.parametrize("kwargs, clamped", [
    ({"limit": 0}, {"limit": {"given": 0, "used": 1}}),
    ({"limit": 51}, {"limit": {"given": 51, "used": 50}}),
    ({"max_tokens": 0}, {"max_tokens": {"given": 0, "used": 1}}),
])
def test_out_of_range_numbers_are_clamped_and_said(filled, kwargs, clamped):
    """The original clamps limit and max_tokens rather than failing the call: so do we, and
    the answer says what was used instead of what was given."""
    result = search.faro(filled, None, query="api", **kwargs)
    assert result["clamped"] == clamped
    if "limit" in kwargs:
        assert len(result["results"]) <= clamped["limit"]["used"]
    assert "clamped" not in search.faro(filled, None, query="api", limit=5)
