"""Which language a file is in, and the tree-sitter parser for it.

The grammars are PyPI wheels (tree-sitter-python, -javascript, -typescript, -go, -rust), main
dependencies of the package; one missing (a trimmed install) is a clear error naming it.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import PurePosixPath
from typing import Any

import tree_sitter

from cuba_memorys.errors import CodeAnchorError

LANGUAGES: tuple[str, ...] = ("python", "javascript", "typescript", "tsx", "go", "rust")

_SUFFIXES = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
}

# language -> (module of the grammar wheel, function returning its language pointer, PyPI name)
_GRAMMARS = {
    "python": ("tree_sitter_python", "language", "tree-sitter-python"),
    "javascript": ("tree_sitter_javascript", "language", "tree-sitter-javascript"),
    "typescript": ("tree_sitter_typescript", "language_typescript", "tree-sitter-typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx", "tree-sitter-typescript"),
    "go": ("tree_sitter_go", "language", "tree-sitter-go"),
    "rust": ("tree_sitter_rust", "language", "tree-sitter-rust"),
}

# A Parser is not safe to share between threads; each thread gets its own, made once.
_local = threading.local()


def language_for(path: str) -> str | None:
    """The language of ``path`` by its suffix, None for anything else (``.d.ts`` is typescript)."""
    return _SUFFIXES.get(PurePosixPath(path).suffix.lower())


def _language(language: str) -> tree_sitter.Language:
    if language not in _GRAMMARS:
        raise CodeAnchorError(f"unknown language {language!r}", hint=f"Known: {', '.join(LANGUAGES)}.")
    module_name, function, package = _GRAMMARS[language]
    try:
        module: Any = importlib.import_module(module_name)
    except ImportError:
        raise CodeAnchorError(f"the {language} grammar is not installed",
                              hint=f"Install it: pip install {package}") from None
    return tree_sitter.Language(getattr(module, function)())


def parser_for(language: str) -> tree_sitter.Parser:
    """A tree-sitter parser for ``language`` (one of LANGUAGES), cached per thread."""
    parsers: dict[str, tree_sitter.Parser] = _local.__dict__.setdefault("parsers", {})
    parser = parsers.get(language)
    if parser is None:
        parser = parsers[language] = tree_sitter.Parser(_language(language))
    return parser
