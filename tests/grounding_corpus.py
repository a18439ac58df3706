"""A small corpus and claims about it, for the grounding tests: true claims, false claims
(each contradicted by a stored fact) and claims about things the memory never heard of."""

from __future__ import annotations

FACTS = [
    ("api-server", "The API server is written in Rust"),
    ("cache", "We use Redis for session storage"),
    ("database", "PostgreSQL listens on port 5432"),
    ("deploys", "Deploys go out every Tuesday with blue-green switching"),
    ("ci", "The CI pipeline runs on GitHub Actions"),
    ("frontend", "The admin dashboard is a React app bundled with Vite"),
]

TRUE_CLAIMS = [
    ("The API server is written in Rust", "The API server is written in Rust"),
    ("We use Redis for session storage", "We use Redis for session storage"),
    ("The CI pipeline runs on GitHub Actions", "The CI pipeline runs on GitHub Actions"),
]
# (claim, the stored fact it contradicts, whether the contradiction is plain to text rules)
FALSE_CLAIMS = [
    ("We do not use Redis for session storage", "We use Redis for session storage", True),
    ("PostgreSQL listens on port 6432", "PostgreSQL listens on port 5432", True),
    ("Deploys never go out on Tuesday", "Deploys go out every Tuesday with blue-green switching", True),
    ("The API server is written in Java", "The API server is written in Rust", False),
    ("The admin dashboard is an Angular app", "The admin dashboard is a React app bundled with Vite", False),
]
UNRELATED_CLAIMS = [
    "The office cat is named Pixel",
    "Quarterly revenue grew by eleven percent",
]


def truth(claim: str, evidence: str) -> str:
    """What a competent judge answers for a (claim, stored evidence) pair of this corpus."""
    for true_claim, fact in TRUE_CLAIMS:
        if claim == true_claim and evidence == fact:
            return "supports"
    for false_claim, fact, _ in FALSE_CLAIMS:
        if claim == false_claim and evidence == fact:
            return "contradicts"
    return "unknown"
