"""cuba_faro mode=verify: is this claim grounded in what the memory holds?

Evidence: observations whose trigram similarity to the claim exceeds 0.3, together with the
vector branch's nearest ones; each is scored by the larger of the two similarities, those at
or above 0.40 are kept (10 at most) and the first 5 are judged. Confidence weighs each verdict
by similarity × the judge's confidence: more contradiction than support → ``contradicted``;
otherwise share × (1 − e^(−2·support)), read as verified (> 0.7), partial (> 0.5), weak (> 0.3)
or unknown. Additions: a plain conflict the text rules see in any judged row (a negation or a
changed number of the same statement) makes the claim contradicted whatever the other verdicts say,
and the row says which ``rule`` fired; support from the text rules alone stays at ``partial`` unless
two independent observations state the claim; and a row whose source's
trust (cuba_calibrar, services/calibration.py) is below 0.5 weighs p_correct/0.5 of its usual weight,
listed in ``trust_adjusted``. Every call is logged, so outcomes can later calibrate each level
(``calibrated_accuracy``, in the caller's project).
"""

from __future__ import annotations

import math

import numpy as np

from cuba_memorys.judge.base import Judge
from cuba_memorys.models import SearchFilter
from cuba_memorys.secrets_scan import redact
from cuba_memorys.services import calibration, validate
from cuba_memorys.services.embedding_queue import embed_now
from cuba_memorys.services.memory import Memory
from cuba_memorys.text import analyze, trigrams, words

MIN_SIMILARITY, TRIGRAM_MIN = 0.40, 0.30
MAX_EVIDENCE, JUDGED = 10, 5
CANDIDATES = 30
LEVELS = ((0.7, "verified"), (0.5, "partial"), (0.3, "weak"))
PARTIAL_CAP, INDEPENDENT = 0.7, 2  # text-rule support alone: partial at most, unless 2 observations state it
MODEL_SUPPORT = 0.5  # a model judge's support this sure lifts that cap
INTERPRETATION = {
    "verified": "Stored evidence supports the claim.",
    "partial": "Some stored evidence supports the claim, not conclusively.",
    "weak": "Little stored evidence supports the claim.",
    "unknown": "The memory cannot confirm or refute the claim: no judge reached a verdict on the evidence.",
    "contradicted": "Stored evidence contradicts the claim.",
}


def _trigram_similarity(a_grams: set[str], text: str) -> float:
    grams = trigrams(text)
    return len(a_grams & grams) / len(a_grams | grams) if a_grams and grams else 0.0


def gather_evidence(mem: Memory, client: str | None, claim: str) -> list[dict]:
    """Up to 10 observations with similarity ≥ 0.40, most similar first. Candidates come from the
    vector branch and from the lexical ones (words, stems); a lexical candidate the background
    queue has not embedded yet is embedded now (embed_now, a few at most), so a claim checked
    right after a batch write is judged on the same evidence as once the queue has caught up."""
    flt = SearchFilter(scope=mem.scope(client), kinds=("observation",))
    similarity: dict[str, float] = {}
    vec = mem.embedder.embed_query(claim) if mem.embedder is not None else None
    if vec is not None:
        for hit in mem.store.vector_candidates("observation", vec, CANDIDATES, flt):
            similarity[hit.id] = max(similarity.get(hit.id, 0.0), hit.score)
    text_hits = mem.store.text_candidates("observation", claim, CANDIDATES, flt)
    stem_hits = mem.store.bm25_candidates("observation", analyze(claim), CANDIDATES, flt)
    lexical = list(dict.fromkeys([*(h.id for h in text_hits), *(h.id for h in stem_hits)]))
    if vec is not None:
        for row_id, fresh in embed_now(mem, "observation", [i for i in lexical if i not in similarity]).items():
            similarity[row_id] = max(similarity.get(row_id, 0.0), float(np.dot(fresh, vec)))
    rows = mem.store.fetch_rows("observation", list(dict.fromkeys([*similarity, *lexical])))
    claim_grams = trigrams(claim)
    for row_id in lexical:
        row = rows.get(row_id)
        tri = _trigram_similarity(claim_grams, row["content"]) if row else 0.0
        if tri > TRIGRAM_MIN:
            similarity[row_id] = max(similarity.get(row_id, 0.0), tri)
    kept = sorted(((s, i) for i, s in similarity.items() if s >= MIN_SIMILARITY and i in rows), reverse=True)
    return [{"id": i, "content": rows[i]["content"], "similarity": round(s, 4),
             "type": rows[i]["observation_type"], "entity": rows[i]["entity_name"], "source": rows[i]["source"]}
            for s, i in kept[:MAX_EVIDENCE]]


def score(evidence: list[dict]) -> tuple[float, str]:
    """(confidence, grounding level) from the judged evidence."""
    def weight(e: dict) -> float:
        return float(e["similarity"] * e["judge_confidence"] * e.get("trust_weight", 1.0))

    support = sum(weight(e) for e in evidence if e.get("verdict") == "supports")
    contra = sum(weight(e) for e in evidence if e.get("verdict") == "contradicts")
    # A plain conflict the text rules see (a negation or a changed number) is decisive: no amount of
    # support from other rows, or from a judge that missed it, may turn the claim verified.
    clear = any(e.get("verdict") == "contradicts" and e.get("judged_by") == "heuristic" for e in evidence)
    if contra > support or clear:
        return round(contra / (support + contra) * (1 - math.exp(-2 * contra)), 4), "contradicted"
    if support == 0:
        return 0.0, "unknown"
    confidence = support / (support + contra) * (1 - math.exp(-2 * support))
    if _text_rules_alone(evidence):
        confidence = min(confidence, PARTIAL_CAP)
    level = next((name for bound, name in LEVELS if confidence > bound), "unknown")
    return round(confidence, 4), level


def _text_rules_alone(evidence: list[dict]) -> bool:
    """Support that only the text rules give, from fewer than two independent observations (two
    rows of the same text are one observation copied): it may reach partial, never verified."""
    supports = [e for e in evidence if e.get("verdict") == "supports"]
    if any(e.get("judged_by") != "heuristic" and e["judge_confidence"] >= MODEL_SUPPORT for e in supports):
        return False
    return len({" ".join(words(e["content"])) for e in supports}) < INDEPENDENT


DECIDING_ROWS, SHORT_TEXT = 2, 200  # the default answer: the rows that decided, their text cut to this


def _clip(text: str, limit: int = SHORT_TEXT) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _weight(e: dict) -> float:
    return float(e["similarity"] * e.get("judge_confidence", 0.0) * e.get("trust_weight", 1.0))


def deciding_rows(evidence: list[dict], level: str) -> list[dict]:
    """The one or two rows that decided ``level``, short: a plain conflict the text rules saw first
    for ``contradicted``, the heaviest support for the supported levels, else the most similar rows
    (what the memory holds nearest to the claim, undecided)."""
    if level == "contradicted":
        rows = sorted((e for e in evidence if e.get("verdict") == "contradicts"),
                      key=lambda e: (e.get("judged_by") != "heuristic", -_weight(e)))
    elif level in ("verified", "partial", "weak"):
        rows = sorted((e for e in evidence if e.get("verdict") == "supports"), key=lambda e: -_weight(e))
    else:
        rows = list(evidence)
    out = []
    for e in rows[:DECIDING_ROWS]:
        row = {"id": e["id"], "entity": e["entity"], "content": _clip(e["content"]), "similarity": e["similarity"]}
        for key in ("source", "verdict", "rule", "judged_by", "trust_weight"):
            if key in e:
                row[key] = e[key]
        if e.get("reason"):
            row["reason"] = _clip(e["reason"])
        out.append(row)
    return out


def verify(mem: Memory, client: str | None, query: object, format: object = None,
           sampler: Judge | None = None) -> dict:
    """cuba_faro mode=verify: the claim (``query``) judged against stored evidence by the judge
    chain (an NLI model, else ``sampler``, the client's model, else the heuristic). ``format``
    compact (the default): the rows that decided, short; verbose: every row gathered, whole."""
    claim = validate.text("query", query, high=10_000)
    shape = validate.choice("format", format, ("compact", "verbose"), default="compact")
    chain = mem.judge_chain(sampler)
    evidence = gather_evidence(mem, client, claim)
    verdicts = chain.judge_claims(claim, [item["content"] for item in evidence[:JUDGED]])
    for item, verdict in zip(evidence, verdicts, strict=False):
        item.update(verdict=verdict.verdict, reason=verdict.reason, judged_by=verdict.backend,
                    judge_confidence=round(verdict.confidence, 4))
        if verdict.rule:
            item["rule"] = verdict.rule
    trust_adjusted = calibration.weigh_by_trust(evidence[:JUDGED], calibration.source_p_correct(mem))
    confidence, level = score(evidence)
    judged_by = chain.backend if evidence else "none"
    # The claim is logged redacted: a credential in it is not refused (nothing asked to store it).
    mem.store.add_verify_log(redact(claim), evidence[0]["entity"] if evidence else None, confidence, level,
                             judged_by, mem.scope(client).project_id)
    response = {
        "mode": "verify", "claim": claim, "confidence": confidence, "grounding": level,
        "interpretation": INTERPRETATION[level] if evidence else "No stored observation is similar enough"
                          " to the claim to judge it.",
        "evidence": evidence if shape == "verbose" else deciding_rows(evidence, level),
        "evidence_count": len(evidence),
        "judged_by": judged_by,
        "verdicts_reached": sum(1 for e in evidence if e.get("verdict") not in (None, "unknown")),
    }
    if trust_adjusted:
        response["trust_adjusted"] = trust_adjusted
    accuracy = calibration.calibrated_accuracy(mem, client, level)
    if accuracy is not None:
        response["calibrated_accuracy"] = accuracy
    return response
