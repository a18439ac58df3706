"""One exception tree for the whole package.

Every error a user can cause or meet derives from :class:`CubaError`. The MCP and CLI
boundaries convert it once into a message; nothing below them formats errors for people.
Each message says what was wrong and, where it helps, what to do instead.
"""

from __future__ import annotations


class CubaError(Exception):
    """Base of every error raised on purpose by cuba-memorys."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}" if self.hint else self.message


class InvalidInput(CubaError):
    """A parameter is missing, of the wrong type, or outside what is accepted."""

    def __init__(self, param: str, problem: str, accepted: str | None = None) -> None:
        text = f"{param}: {problem}"
        if accepted:
            text += f" (accepted: {accepted})"
        super().__init__(text)
        self.param = param


class NotFound(CubaError):
    """A named entity, observation, project or other row does not exist (or is not visible)."""


class SecretRefused(CubaError):
    """Content looks like a credential and the caller did not pass allow_secret=true."""


class StorageError(CubaError):
    """The store cannot be opened, migrated or written."""


class StoreUnreadable(StorageError):
    """The embedded store's file is not a SQLite database, or is damaged: nothing can be read or
    written until it is recovered. ``ways_out`` lists what to try, in order; nothing is deleted."""

    def __init__(self, message: str, *, path: str, kind: str, ways_out: list[str]) -> None:
        steps = " ".join(f"({n}) {step}" for n, step in enumerate(ways_out, 1))
        super().__init__(message, hint=f"Nothing was changed or deleted. Ways out, in order: {steps}")
        self.path, self.kind, self.ways_out = path, kind, ways_out


class ConfigError(CubaError):
    """A setting (environment variable or stored metadata) is inconsistent or unusable."""


class ModelMismatch(ConfigError):
    """The stored embeddings were made by a model of another dimension than the loaded one."""


class ModelUnavailable(CubaError):
    """No embedding model could be loaded; search runs degraded (lexical only)."""


class AccessDenied(CubaError):
    """The caller's principal holds no grant that allows this call (services/access.py)."""


class HandlerTimeout(CubaError):
    """A tool call ran past CUBA_HANDLER_TIMEOUT_SECS; it was stopped and rolled back."""


class NotAvailableYet(CubaError):
    """A documented feature that this build does not provide yet."""


class Conflict(CubaError):
    """The stored row moved on, or another client holds it: a write based on what the caller
    read would overwrite someone else's. Nothing was written; the message says the current state."""


class CodeAnchorError(CubaError):
    """A path or source file the code layer refuses: outside the repository (absolute, `..`,
    a symlink leaving the root), binary, too large, or a language whose grammar is missing."""
