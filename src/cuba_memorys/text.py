"""Text analysis shared by storage and search: one analyzer so every backend ranks alike.

The lexical index stores :func:`analyze` output rather than relying on a database's own
stemmer, because SQLite's FTS5 only stems English and our users write English and Spanish.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from functools import lru_cache

import snowballstemmer

from cuba_memorys import locks

# Bump when analyze() changes: stores re-index their lexical tables when it differs.
ANALYZER_VERSION = 1

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

STOPWORDS_EN = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "s", "t", "d", "ll", "m", "re", "ve", "don"])  # noqa: E501 - a word list, one line

STOPWORDS_ES = frozenset(["a", "al", "algo", "algunas", "algunos", "ante", "antes", "como", "con", "contra", "cual", "cuando", "de", "del", "desde", "donde", "durante", "e", "el", "ella", "ellas", "ellos", "en", "entre", "era", "eran", "es", "esa", "esas", "ese", "eso", "esos", "esta", "estaba", "estado", "estas", "este", "esto", "estos", "fue", "fueron", "ha", "hay", "han", "hasta", "la", "las", "le", "les", "lo", "los", "mas", "me", "mi", "mis", "mucho", "muy", "ni", "no", "nos", "nosotros", "o", "os", "otra", "otro", "para", "pero", "poco", "por", "porque", "que", "quien", "se", "sea", "ser", "si", "sin", "sobre", "su", "sus", "tambien", "te", "tiene", "tu", "tus", "un", "una", "uno", "unos", "y", "ya", "yo"])  # noqa: E501 - a word list, one line

STOPWORDS = STOPWORDS_EN | STOPWORDS_ES

_STEMMERS = {
    "en": snowballstemmer.stemmer("english"),
    "es": snowballstemmer.stemmer("spanish"),
}


def fold(text: str) -> str:
    """Lowercase and strip accents, so 'Configuración' and 'configuracion' meet."""
    if text.isascii():  # nothing to decompose: the common case, and 10x cheaper
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def words(text: str) -> list[str]:
    return _WORD.findall(fold(text))


def guess_language(tokens: list[str]) -> str:
    """'es' when Spanish function words outnumber English ones, else 'en'."""
    en = sum(1 for t in tokens if t in STOPWORDS_EN and t not in STOPWORDS_ES)
    es = sum(1 for t in tokens if t in STOPWORDS_ES and t not in STOPWORDS_EN)
    return "es" if es > en else "en"


_STEM_LOCK = locks.lock("stemmers", "cache")


@lru_cache(maxsize=65536)
def _stem(word: str, language: str) -> str:
    # snowballstemmer's stemmers keep their state on the object: two threads stemming at once
    # corrupt each other's result (and the cache would keep the wrong stem), so one at a time.
    with _STEM_LOCK:
        return _STEMMERS[language].stemWord(word)


def stem(word: str, language: str) -> str:
    """A folded word's Snowball stem in ``language`` ("en" or "es")."""
    return _stem(word, language)


def analyze(text: str) -> list[str]:
    """Content words of ``text``, folded and stemmed in the text's guessed language."""
    tokens = words(text)
    language = guess_language(tokens)
    return [_stem(t, language) for t in tokens if t not in STOPWORDS]


@lru_cache(maxsize=65536)
def _word_trigrams(word: str) -> frozenset[str]:
    padded = f"  {word} "
    return frozenset(padded[i:i + 3] for i in range(len(padded) - 2))


def trigrams(text: str) -> set[str]:
    """Trigrams as PostgreSQL's pg_trgm makes them: per word, padded with two spaces before
    and one after."""
    found = set(words(text))  # each distinct word once: search rescoring calls this per candidate
    return set().union(*map(_word_trigrams, found)) if found else set()


def trigram_similarity(a: str, b: str) -> float:
    ga, gb = trigrams(a), trigrams(b)
    if not ga or not gb:
        return 0.0
    return len(ga & gb) / len(ga | gb)


def word_overlap(a: str, b: str) -> float:
    """|A ∩ B| / min(|A|, |B|) over word sets: the original's result-dedup measure."""
    wa, wb = set(words(a)), set(words(b))
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / min(len(wa), len(wb))


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATION = re.compile(r"\b(?:not|no|never|don't|doesn't|isn't|won't|can't|nunca|jamás|tampoco)\b", re.I)


_NEGATION_MARKERS = re.compile(
    r"\b(?:not|no|never|none|nothing|neither|nor|cannot|\w+n't|nunca|jamás|jamas|tampoco|ni|ningún|ningun"
    r"|ninguna|ninguno|nada)\b", re.I)


def has_negation(text: str) -> bool:
    """Whether the text carries an English or Spanish negation marker."""
    return bool(_NEGATION_MARKERS.search(text))


def numbers(text: str) -> list[str]:
    return _NUMBER.findall(text)


def same_claim(a: str, b: str) -> bool:
    """False when two similar texts differ in a number or in negation: "port 8080" and
    "port 8081" state different facts, so neither write-dedup nor result-dedup may merge them."""
    return (_NUMBER.findall(a) == _NUMBER.findall(b)
            and bool(_NEGATION.search(a)) == bool(_NEGATION.search(b)))


def extract_tags(text: str, limit: int = 5) -> list[str]:
    """The most frequent content words longer than two characters."""
    counts = Counter(w for w in words(text) if len(w) > 2 and w not in STOPWORDS and not w.isdigit())
    return [w for w, _ in counts.most_common(limit)]


def information_density(text: str) -> float:
    """Shannon entropy of the word distribution, normalised to 0..1 by its maximum."""
    tokens = words(text)
    if len(tokens) < 2:
        return 0.0
    counts = Counter(tokens)
    total = len(tokens)
    entropy = -sum(c / total * math.log2(c / total) for c in counts.values())
    return round(entropy / math.log2(total), 4)


IMPORTANCE_PRIOR = {"decision": 0.8, "lesson": 0.75, "error": 0.7, "solution": 0.7}


def importance_prior(observation_type: str, text: str) -> float:
    """Decisions and lessons start high; other rows by how much information they carry."""
    if observation_type in IMPORTANCE_PRIOR:
        return IMPORTANCE_PRIOR[observation_type]
    return round(0.3 + 0.4 * information_density(text), 4)


def query_entropy(text: str) -> float:
    """Shannon entropy (bits) over the query's words, used to route between branches."""
    tokens = words(text)
    if not tokens:
        return 0.0
    counts = Counter(tokens)
    total = len(tokens)
    return -sum(c / total * math.log2(c / total) for c in counts.values())
