"""A held-out verify corpus: 20 stored facts and 30 claims about them (10 true, 10 false, 10 that
the memory cannot settle), English and Spanish, for cuba_faro mode=verify end to end.

True claims restate a fact in other words the text rules may know (listed synonyms, dropped
qualifiers) or may not (passive voice), so the share they confirm is a measurement, not a given.
False claims are plain (a negation or another value of the same statement) or need a model
("written in Go" against "written in Rust"). bench/judge_precision.py reports the levels;
tests/test_text_judge.py holds the floor.
"""

from __future__ import annotations

FACTS: list[tuple[str, str]] = [
    ("auth", "Passwords are hashed with argon2id, never with bcrypt."),
    ("auth", "Session tokens expire in 30 minutes."),
    ("api-gateway", "The API gateway is written in Rust."),
    ("api-gateway", "The gateway listens on port 8443 and terminates TLS."),
    ("billing", "The billing service retries failed webhooks 5 times."),
    ("billing", "Invoices are stored in PostgreSQL, not in MongoDB."),
    ("ci", "The CI pipeline runs on GitHub Actions and caches the wheels."),
    ("ci", "Releases are tagged from the main branch only."),
    ("frontend", "The admin dashboard is a React app bundled with Vite."),
    ("search", "The search index is rebuilt every night at 03:00 UTC."),
    ("search", "If the index is missing, search falls back to SQL LIKE queries."),
    ("queue", "We might move the job queue to Kafka next quarter."),
    ("queue", "The job queue uses Redis streams."),
    ("deploy", "Deploys go out every Tuesday with blue-green switching."),
    ("deploy", "We used to deploy with Jenkins."),
    ("logging", "The payments service never logs card numbers."),
    ("cache", "Usamos Redis para la caché, pero no para las sesiones."),
    ("servidor", "El servidor de la API escucha en el puerto 8080."),
    ("despliegue", "Los despliegues se hacen los martes."),
    ("contraseñas", "Las contraseñas deben tener al menos 12 caracteres."),
]

TRUE_CLAIMS: list[str] = [
    "Passwords are hashed using argon2id.",
    "Session tokens are valid for 30 minutes.",
    "The API gateway is implemented in Rust.",
    "The gateway listens on port 8443.",
    "The billing service retries failed webhooks 5 times.",
    "The CI pipeline runs on GitHub Actions.",
    "The admin dashboard is a React app.",
    "Usamos Redis para la caché.",
    "El servidor de la API escucha en el puerto 8080.",
    "PostgreSQL stores the invoices.",  # passive/active switch: beyond the text rules
]

# (claim, plain: a text rule must catch it)
FALSE_CLAIMS: list[tuple[str, bool]] = [
    ("Passwords are hashed with bcrypt.", True),
    ("Session tokens expire in 60 minutes.", True),
    ("The gateway listens on port 9443.", True),
    ("The billing service retries failed webhooks 3 times.", True),
    ("Invoices are stored in MongoDB.", True),
    ("Deploys never go out on Tuesday.", True),
    ("El servidor de la API escucha en el puerto 9090.", True),
    ("Los despliegues no se hacen los martes.", True),
    ("The API gateway is written in Go.", False),
    ("The admin dashboard is an Angular app.", False),
]

UNSETTLED_CLAIMS: list[str] = [
    "Search falls back to SQL LIKE queries.",  # only if the index is missing
    "We move the job queue to Kafka.",  # only a plan
    "We deploy with Jenkins.",  # no longer
    "Releases are tagged from feature branches too.",
    "The payments service logs request ids.",
    "Usamos Redis en producción.",
    "Las contraseñas deben tener al menos 8 caracteres.",
    "The office cat is named Pixel.",
    "The search index is rebuilt every hour.",
    "The job queue uses RabbitMQ.",
]
