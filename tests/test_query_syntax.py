"""The query mini-syntax (search/query_syntax.py): pure parsing, dates against a fixed now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import iso
from cuba_memorys.search.query_syntax import parse_id, parse_query, resolve_when

NOW = datetime(2026, 10, 15, 12, 30, tzinfo=UTC)
MIDNIGHT = datetime(2026, 10, 15, tzinfo=UTC)
UUID = "0b6e1f0c-3c55-4a37-9d2a-2f5c7d1e9a10"


def parse(query: str):
    return parse_query(query, NOW)


def test_every_key_mixed_with_free_text_in_any_order():
    q = parse('deploy code:opencode_session_forensics category:infraestructura,trigger:mcp nivel:automatica'
              ' type:Decision id:4039 #12 after:2026-10-01 before:today "frase exacta" pipeline')
    assert q.text == "deploy pipeline"
    assert q.codes == ("opencode_session_forensics",)
    assert q.categories == ("infraestructura", "trigger:mcp")  # only the first colon splits
    assert q.niveles == ("automatica",)
    assert q.types == ("decision",)
    assert q.seqs == (4039, 12)
    assert q.after == iso(datetime(2026, 10, 1, tzinfo=UTC))
    assert q.before == iso(MIDNIGHT)
    assert q.phrases == ("frase exacta",)
    assert q.search_text == "deploy pipeline frase exacta"
    assert q.used_syntax


def test_aliases_and_value_forms():
    q = parse('categories:A,b since:7d nivel:Semántica,episodica id:' + UUID + ',7 code:"my code"')
    assert q.categories == ("a", "b")
    assert q.after == iso(NOW - timedelta(days=7))
    assert q.niveles == ("semantica", "episodica")  # accents and case folded
    assert q.ids == (UUID,) and q.seqs == (7,)
    assert q.codes == ("my code",) and q.text == ""


def test_relative_and_absolute_dates():
    assert resolve_when("today", NOW) == MIDNIGHT
    assert resolve_when("yesterday", NOW) == MIDNIGHT - timedelta(days=1)
    assert resolve_when("12h", NOW) == NOW - timedelta(hours=12)
    assert resolve_when("2w", NOW) == NOW - timedelta(weeks=2)
    assert resolve_when("2026-10-01", NOW) == datetime(2026, 10, 1, tzinfo=UTC)
    assert resolve_when("2026-10-01T09:00:00Z", NOW) == datetime(2026, 10, 1, 9, tzinfo=UTC)
    assert resolve_when("2026-10-01T09:00:00+02:00", NOW) == datetime(2026, 10, 1, 7, tzinfo=UTC)
    for bad in ("soon", "7x", "2026-13-01", ""):
        assert resolve_when(bad, NOW) is None


def test_repeated_bounds_keep_the_narrower_window():
    q = parse("after:2026-01-01 since:2d before:today before:2026-12-31 x")
    assert q.after == iso(NOW - timedelta(days=2))
    assert q.before == iso(MIDNIGHT)


def test_repeated_keys_add_up_without_duplicates():
    q = parse("code:a code:b code:a type:fact type:lesson")
    assert q.codes == ("a", "b") and q.types == ("fact", "lesson")


@pytest.mark.parametrize("query", [
    "see https://example.com/a:b for details",
    "std::vector<int> resize",
    "note: the port is 5432",
    "what is the user id: 42",  # a known key with no value stays text
    "ticket #abc and #",
    'unclosed "quote here',
    "Kind:thing mailto:x",
])
def test_unknown_keys_and_odd_text_stay_free_text(query):
    q = parse(query)
    assert q.text == " ".join(query.split())
    assert not q.used_syntax


def test_phrases_with_straight_and_smart_quotes():
    q = parse('“Exact  Phrase” and "another one" ""')
    assert q.phrases == ("Exact Phrase", "another one")
    assert q.text == "and"


def test_numeric_and_uuid_ids():
    assert parse_id("4039") == 4039 and parse_id("#4039") == 4039
    assert parse_id(UUID.upper()) == UUID
    assert parse_id("abc") is None and parse_id("-1") is None


@pytest.mark.parametrize("query, fragment", [
    ("after:soon", "after:soon"),
    ("before:2026-02-30", "before:2026-02-30"),
    ("since:7x", "since:7x"),
    ("nivel:procedural", "nivel"),
    ("id:abc", "id:abc"),
    ("id:12,nope", "nope"),
])
def test_a_known_key_with_an_unreadable_value_is_a_clear_error(query, fragment):
    with pytest.raises(InvalidInput) as err:
        parse(query)
    assert err.value.param == "query" and fragment in str(err.value)


def test_plain_queries_are_untouched():
    q = parse("how are wheels built?")
    assert q.text == "how are wheels built?" and not q.used_syntax and q.search_text == q.text
