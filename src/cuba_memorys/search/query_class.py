"""What kind of question a cuba_faro query is: global, multi_hop or factoid (the default).

Lexical and deterministic, as the original's router (0.27): a query is *global* when it holds
one of the overview phrases, else *multi_hop* when it holds one of the relation phrases, else
*factoid*. English and Spanish; compared folded (case and accents ignored) and as whole
words, so "how is" matches "How is auth wired?" but not "show isolation levels".
"""

from __future__ import annotations

from cuba_memorys.text import words

QUERY_CLASSES = ("factoid", "multi_hop", "global")

GLOBAL_PHRASES = ("temas principales", "main themes", "resumen del corpus", "overview of", "comunidades",
                  "communities", "qué cubre", "what are the themes")
MULTI_HOP_PHRASES = ("cómo se relaciona", "como se relaciona", "how does", "how is", "relaciona", "relacion",
                     "relación", "depende de", "depende", "depends on", "conecta", "que une", "ligado",
                     "por qué", "por que", "why does", "cadena", "multi-hop", "camino entre", "path between",
                     "causas de", "causes of")


def _folded(phrases: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(dict.fromkeys(tuple(words(p)) for p in phrases))


_GLOBAL = _folded(GLOBAL_PHRASES)
_MULTI_HOP = _folded(MULTI_HOP_PHRASES)


def contains_words(haystack: list[str], needle: tuple[str, ...] | list[str]) -> bool:
    """Whether ``needle``'s words occur consecutively in ``haystack`` (both folded words)."""
    size = len(needle)
    if not size:
        return False
    first = needle[0]
    return any(haystack[i:i + size] == list(needle) for i, w in enumerate(haystack) if w == first)


def classify(query: str) -> str:
    """'global', 'multi_hop' or 'factoid' for ``query``."""
    tokens = words(query)
    if any(contains_words(tokens, phrase) for phrase in _GLOBAL):
        return "global"
    if any(contains_words(tokens, phrase) for phrase in _MULTI_HOP):
        return "multi_hop"
    return "factoid"
