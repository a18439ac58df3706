"""Refuse to store credentials by accident.

Memories are synced, exported and shown to other agents; a pasted token would travel with
them. Patterns are deliberately specific (known key shapes, key=value assignments with a
long value) so ordinary prose about passwords is not refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private key block", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b")),
    ("OpenAI/Anthropic API key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("Stripe key", re.compile(r"\b[rs]k_live_[0-9A-Za-z]{16,}\b")),
    ("JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    ("URL with embedded password", re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]{4,}@")),
    (
        "password or secret assignment",
        re.compile(
            r"(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)"
            r"\s*[:=]\s*['\"]?(?P<value>[^\s'\",;]{8,})"
        ),
    ),
]

# Documentation and chat logs are full of `api_key: <API_KEY>` and `token = 'your-token'`.
_PLACEHOLDER = re.compile(r"(?i)^[<{$\[(]|your|example|placeholder|changeme|xxxx|\.\.\.|\*\*\*|"
                          r"^(?:process\.env|os\.environ|env\.|getenv)")


def _looks_real(value: str) -> bool:
    """An assigned value that is not a placeholder and mixes characters like a credential."""
    if _PLACEHOLDER.search(value):
        return False
    has_digit = any(c.isdigit() for c in value)
    mixed_case = any(c.islower() for c in value) and any(c.isupper() for c in value)
    return has_digit or mixed_case


@dataclass(frozen=True)
class SecretMatch:
    kind: str
    position: int


def find_secret(text: str) -> SecretMatch | None:
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            value = match.groupdict().get("value")
            if value is None or _looks_real(value):
                return SecretMatch(kind, match.start())
    return None
