"""Refuse to store credentials by accident, and let the placeholders of examples through.

Memories are synced, exported and shown to other agents; a pasted token would travel with
them. Patterns are specific (known key shapes, headers, key=value assignments with a long
value, URLs with a password), so ordinary prose about passwords is not refused. Coding chats
are also full of examples — ``postgresql://user:password@localhost/mydb``, ``api_key =
"<YOUR_KEY>"``, AWS's documented ``AKIAIOSFODNN7EXAMPLE`` — and refusing those would refuse
most of what an agent learns about configuration, so a match whose secret part is a
placeholder (a well-known dummy, a template such as ``<...>`` or ``${...}``, ``xxxx``, a value
that says it is an example, or a URL to an example host) is let through.

``tests/secrets_corpus.py`` is the labelled set this is measured on (real-format secrets,
generated, never real; placeholders from public docs and coding chats): every secret caught,
no placeholder refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# A value that says it is not real: templates, masks, "your-…", "example", environment lookups.
_PLACEHOLDER = re.compile(
    r"(?i)^[<{\[(]|^\$\{|^\$[A-Z_]+$|\{\{|^%\(|your|example|sample|placeholder|changeme|change[_-]me|dummy|"
    r"fake|redacted|x{4,}|\*{3,}|\.\.\.|…|^(?:process\.env|os\.environ|env\.|getenv|settings\.|config\.)")
# Passwords that tutorials use (compared lower-case, with my/your/_ prefixes and digits 123 off).
_DUMMY_PASSWORDS = {
    "password", "passwd", "pass", "pwd", "pw", "secret", "secretpassword", "supersecret", "mysecretpassword",
    "changeme", "admin", "root", "postgres", "mysql", "test", "testing", "example", "demo", "guest", "user",
    "letmein", "qwerty", "hunter", "foobar", "foo", "bar", "pa55word", "passw0rd", "p4ssw0rd", "s3cret",
    "dbpass", "dbpassword", "userpass", "userpassword", "pass123", "password123", "123456", "12345678",
}
_EXAMPLE_HOST = re.compile(r"(?i)(?:^|\.)(?:example\.(?:com|org|net)|example|test|invalid|local)$|^(?:host|hostname|"
                           r"server|your[-_]?host|db[-_]?host|<[^>]*>|\$\{[^}]*\})$")


def _dummy_password(value: str) -> bool:
    core = re.sub(r"^(?:my|your|some|the)[_-]?|[_-]?\d{1,4}$", "", value.lower())
    return value.lower() in _DUMMY_PASSWORDS or core in _DUMMY_PASSWORDS or bool(_PLACEHOLDER.search(value))


# What code assigns when it passes a credential along instead of writing it: a dotted name
# without digits (credential.ApiKey, process.env.API_KEY), maybe after an operator ("KEY=" +
# cfg.key). A credential is not spelled like that; one that merely starts with "+" still counts.
_CODE_REFERENCE = re.compile(r"^[+&*]?\s*[A-Za-z_]+(?:\.[A-Za-z_]+)+(?:\(\))?$")


def _looks_real(value: str) -> bool:
    """An assigned value that is not a placeholder, not code referring to a credential, and
    mixes characters like a credential."""
    if _PLACEHOLDER.search(value) or _dummy_password(value) or _CODE_REFERENCE.search(value):
        return False
    has_letter = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    mixed_case = any(c.islower() for c in value) and any(c.isupper() for c in value)
    return has_letter and (has_digit or mixed_case)


def _url_is_real(match: re.Match[str]) -> bool:
    password, host = match.group("password"), match.group("host")
    if _dummy_password(password) or _EXAMPLE_HOST.search(host or ""):
        return False
    return not _PLACEHOLDER.search(match.group("user"))


def _value_is_real(match: re.Match[str]) -> bool:
    return _looks_real(match.group("value"))


def _key_is_real(match: re.Match[str]) -> bool:
    """A known key shape is real unless it says otherwise (AWS documents AKIAIOSFODNN7EXAMPLE;
    docs write ghp_xxxxxxxx…). Random key characters never spell these by chance."""
    return not re.search(r"(?i)example|x{8,}|\*{3,}|\.{3}|<|\$\{", match.group(0))


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern[str]
    real: Callable[[re.Match[str]], bool] | None = None  # None: every match is a secret


# A private key is its whole block, not its first line: redact() must remove the body too. The
# block runs to its END line, across lines (real ones or the backslash-n escapes of a .env or JSON
# value), never past the next BEGIN. A block pasted without its END line runs over what looks like
# a key's body: long base64 runs, "Proc-Type: ..." header lines, the blank line of PGP armour.
_BREAKS = r"(?:\s|\\[rn])+"  # whitespace, or an escaped line break
_HEADER_LINE = r"[ \t]*(?:\r?\n|(?:\\r)?\\n)[ \t]*[A-Z][A-Za-z-]*: [^\r\n\\]*"
_KEY_BLOCK = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:(?:(?!-----BEGIN )[\s\S])*?-----END [A-Z0-9 ]*-----"
    rf"|(?:{_BREAKS}[A-Za-z0-9+/=]{{16,}}|{_HEADER_LINE})*)")

_RULES: list[Rule] = [
    Rule("private key block", _KEY_BLOCK),
    Rule("AWS access key id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), _key_is_real),
    Rule("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b"), _key_is_real),
    Rule("GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"), _key_is_real),
    Rule("OpenAI/Anthropic API key", re.compile(r"\bsk-(?:ant-(?:api\d+-)?|proj-|svcacct-)?[A-Za-z0-9_-]{20,}"),
         _key_is_real),
    Rule("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), _key_is_real),
    Rule("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), _key_is_real),
    Rule("Stripe key", re.compile(r"\b[rs]k_live_[0-9A-Za-z]{16,}\b"), _key_is_real),
    Rule("npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), _key_is_real),
    Rule("JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
    Rule("URL with embedded password",
         re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://(?P<user>[^/\s:@]*):(?P<password>[^/\s@]{4,})@(?P<host>[^/\s:?#]*)"),
         _url_is_real),
    Rule("authorization header", re.compile(
        r"(?i)\bauthorization\s*[:=]\s*['\"]?(?:bearer|basic|token)\s+(?P<value>[A-Za-z0-9._~+/=-]{12,})"),
         _value_is_real),
    Rule("password or secret assignment", re.compile(
        r"(?i)\b[A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token"
        r"|private[_-]?key|client[_-]?secret)[A-Za-z0-9_]*['\"]?\s*[:=]\s*['\"]?(?P<value>[^\s'\",;]{8,})"),
         _value_is_real),
]


@dataclass(frozen=True)
class SecretMatch:
    kind: str
    position: int
    end: int


def find_secret(text: str) -> SecretMatch | None:
    """The first credential in ``text`` that is not a placeholder, or None."""
    found = find_secrets(text)
    return found[0] if found else None


def find_secrets(text: str) -> list[SecretMatch]:
    """Every credential in ``text`` that is not a placeholder, in order (overlaps included)."""
    out = [SecretMatch(rule.kind, match.start(), match.end())
           for rule in _RULES for match in rule.pattern.finditer(text)
           if rule.real is None or rule.real(match)]
    return sorted(out, key=lambda m: (m.position, -m.end))


def redact(text: str) -> str:
    """``text`` with every credential replaced by ``[redacted <kind>]`` (what is logged instead);
    overlapping matches are redacted as one span."""
    spans: list[SecretMatch] = []
    for match in find_secrets(text):
        if spans and match.position < spans[-1].end:
            last = spans[-1]
            spans[-1] = SecretMatch(last.kind, last.position, max(last.end, match.end))
        else:
            spans.append(match)
    for span in reversed(spans):
        text = text[:span.position] + f"[redacted {span.kind}]" + text[span.end:]
    return text
