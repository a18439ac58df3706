"""Result rows as agents receive them, and the exact token budget over them."""

from __future__ import annotations

import json

from cuba_memorys.search.entity_factoid import BRANCH as ENTITY_FACTOID  # also the key marking its rows
from cuba_memorys.search.fusion import Fused
from cuba_memorys.search.tokens import row_tokens, truncate_to_tokens


def cut_bytes(text: str, limit: int) -> str:
    """Cut to at most ``limit`` UTF-8 bytes without splitting a character."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


def _entity_name(kind: str, row: dict) -> str:
    if kind == "entity":
        return row["name"]
    if kind == "error":
        return row["error_type"]
    return row.get("entity_name", "")


def row_content(kind: str, row: dict) -> str:
    if kind == "entity":
        return row["name"]
    if kind == "error":
        return row["error_message"]
    return row["content"]


def _type(kind: str, row: dict) -> str:
    return row["observation_type"] if kind == "observation" else kind


def _importance(kind: str, row: dict) -> float:
    if kind == "error":
        return round(min(1.0, 0.5 + 0.1 * row.get("synapse_weight", 1.0)), 4)
    return round(float(row.get("importance", 0.5)), 4)


def compact_row(item: Fused, row: dict, compact_chars: int) -> dict:
    """Keys id, e, c, s, t, i (as the original) plus d, the row's creation date, which
    agents need for questions about when something happened."""
    out = {
        "id": item.id,
        "e": _entity_name(item.kind, row),
        "c": cut_bytes(row_content(item.kind, row), compact_chars),
        "s": round(item.score, 6),
        "t": _type(item.kind, row),
        "i": _importance(item.kind, row),
        "d": (row.get("created_at") or "")[:10],
    }
    if row.get("evidence") and row["evidence"] != "asserted":
        out["evidence"] = row["evidence"]
        out["verified_at"] = row.get("verified_at")
    if row.get("as_of", {}).get("changed_since"):
        out["as_of"] = row["as_of"]  # what it said then is not what it says now
    if ENTITY_FACTOID in item.branch_scores:
        out[ENTITY_FACTOID] = True
    return out


def verbose_row(item: Fused, row: dict, compact_chars: int) -> dict:
    kind = item.kind
    if kind == "entity":
        out = {"id": item.id, "type": "entity", "name": row["name"], "entity_type": row["entity_type"],
               "importance": _importance(kind, row)}
    elif kind == "error":
        out = {"id": item.id, "type": "error", "error_type": row["error_type"],
               "error_message": row["error_message"], "resolved": bool(row["resolved"])}
    elif kind == "episode":
        out = {"id": item.id, "type": "episode", "entity_name": row["entity_name"],
               "content": row["content"], "importance": _importance(kind, row)}
    else:
        out = {"id": item.id, "type": "observation", "entity_name": row["entity_name"],
               "content": row["content"], "observation_type": row["observation_type"],
               "importance": _importance(kind, row), "tags": row.get("tags", []),
               "evidence": row.get("evidence", "asserted")}
    out["created_at"] = row.get("created_at")
    out["score"] = round(item.score, 6)
    out["fused_score"] = round(item.score, 6)
    for branch in ("text", "vector", "bm25"):
        value = item.branch_scores.get(branch)
        out[f"{branch}_score"] = None if value is None else round(value, 6)
    out["session_boosted"] = "session" in item.branch_scores
    if "associative" in item.branch_scores:
        out["associative"] = True
    if ENTITY_FACTOID in item.branch_scores:
        out[ENTITY_FACTOID] = True
    if "as_of" in row:
        out["as_of"] = row["as_of"]
    return out


def budget_rows(rows: list[dict], max_tokens: int, content_key: str) -> list[dict]:
    """Keep rows while they fit in ``max_tokens`` (cl100k, counted on each row's JSON); the
    row that overflows is truncated to what is left (marked ``truncated``), then output stops."""
    # A cl100k token covers at least one UTF-8 byte, so when the rows' JSON fits in
    # ``max_tokens`` bytes they fit in as many tokens: every row is kept, exactly as the
    # count below would decide, without loading the encoding or counting (the common case).
    if sum(len(json.dumps(row, ensure_ascii=False).encode("utf-8")) for row in rows) <= max_tokens:
        return list(rows)
    kept: list[dict] = []
    used = 0
    for row in rows:
        cost = row_tokens(row)
        if used + cost > max_tokens:
            cut = _truncated(row, max_tokens - used, content_key)
            if cut is not None:
                kept.append(cut)
            break
        kept.append(row)
        used += cost
    return kept


def _truncated(row: dict, room: int, content_key: str) -> dict | None:
    """The row with its content cut so the whole row costs at most ``room`` tokens."""
    text = row.get(content_key)
    if not isinstance(text, str):
        return None
    shell = row_tokens({**row, content_key: "", "truncated": True})
    budget = room - shell
    while budget > 0:
        cut = {**row, content_key: truncate_to_tokens(text, budget), "truncated": True}
        if row_tokens(cut) <= room:
            return cut
        budget -= max(1, budget // 10)  # JSON escaping can cost a few extra tokens
    return None
