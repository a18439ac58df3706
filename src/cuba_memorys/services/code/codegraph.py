"""`cuba-memorys codegraph build` (spec §4d, issue 19): the symbols of a repository's code as
entities, with one observed observation each, and call and import edges.

Incremental: a file whose content hashes as it did at the last build is not re-read (its
recorded symbols still count for call resolution). A symbol that left a re-read file, or every
symbol of a file that is gone, has its observation retired the way merges and summaries retire
rows (superseded, facts closed, an undo file first, audited), never deleted. A build touches
only the observations it wrote for this repository (their verification says "tree-sitter parse
of <file> in <root>"), never an agent's note on the same entity nor another checkout's rows in
the same project. One transaction per run, and no session (recall's "last session" stays the
user's). Only the files git lists are parsed, so .gitignore holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuba_memorys.code.languages import LANGUAGES, language_for
from cuba_memorys.code.repo import git_bytes, read_source, repo_root
from cuba_memorys.code.symbols import ImportStatement, Symbol, parse_file
from cuba_memorys.errors import CodeAnchorError, InvalidInput, NotFound
from cuba_memorys.models import MAX_NAME_CHARS, MAX_PREVIOUS_VERSIONS, Entity, NewObservation, Scope, iso, utc_now
from cuba_memorys.services import audit, validate
from cuba_memorys.services.lifecycle import facts, undo
from cuba_memorys.services.memory import Memory
from cuba_memorys.storage.codegraph_rows import CodegraphFileRow, CodegraphObservationRow
from cuba_memorys.text import importance_prior

CLIENT = "codegraph"  # its own client state: a build never changes another client's project
SKIP_DIRS = frozenset({"target", "node_modules", ".git", "dist", "build", "__pycache__", ".venv"})
GIT_TIMEOUT = 60  # seconds for `git ls-files` (a huge checkout on a slow disk)
SKIPPED_LISTED = 50  # the answer lists this many skipped files (the count is always whole)


def verification_of(path: str, root: Path | str) -> str:
    """The marker of a build's own observations: the file AND its repository, so two checkouts in
    one project (same relative paths, same entity names) never update or retire each other's."""
    return f"tree-sitter parse of {path} in {root}"


def legacy_verification_of(path: str) -> str:
    """The marker builds wrote before it named the repository: adopted by the repository whose
    recorded files (codegraph_files) include the path."""
    return f"tree-sitter parse of {path}"


def identity_prefix(symbol: Symbol) -> str:
    return f"{symbol.kind} `{symbol.simple}` in {symbol.path}:"


def content_of(symbol: Symbol) -> str:
    return f"{identity_prefix(symbol)}{symbol.line_start}-{symbol.line_end}\n{symbol.signature}"


# -- input -------------------------------------------------------------------------------
def languages_from(values: Sequence[str] | None) -> tuple[str, ...]:
    """--lang values (repeatable, comma-separated); every language when none. "typescript"
    includes tsx files."""
    names = [n.strip().lower() for v in values or () for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in LANGUAGES]
    if unknown:
        raise InvalidInput("--lang", f"unknown language {unknown[0]!r}", ", ".join(LANGUAGES))
    chosen = set(names or LANGUAGES)
    if "typescript" in chosen:
        chosen.add("tsx")
    return tuple(lang for lang in LANGUAGES if lang in chosen)


def place_of(path: str | None, cwd: Path) -> tuple[Path, Path]:
    """(folder to walk, repository root) for --path (default: the current directory)."""
    folder = (cwd / path) if path else cwd
    if not folder.exists():
        raise NotFound(f"--path {path or folder}: no such directory.")
    if not folder.is_dir():
        raise InvalidInput("--path", f"{path} is not a directory", "a folder inside a git repository")
    root = repo_root(folder)
    if root is None:
        raise InvalidInput("--path", f"{folder} is not inside a git work tree",
                           "a folder of a git repository (codegraph names files relative to its root)")
    return folder.resolve(), root


def listed_files(folder: Path, root: Path) -> list[bytes]:
    """The files git would track under ``folder`` (tracked, plus untracked ones .gitignore does
    not exclude), as raw names relative to ``root``: a gitignored venv or build output is never
    parsed. Raw bytes, because a file name need not be valid UTF-8."""
    under = folder.relative_to(root).as_posix() if folder != root else "."
    out = git_bytes(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", under,
                    timeout=GIT_TIMEOUT)
    return sorted({name for name in out.split(b"\0") if name})


def walk(folder: Path, root: Path, languages: Sequence[str]) -> tuple[list[tuple[str, str]], list[dict[str, str]]]:
    """Source files under ``folder`` in ``languages`` as (path relative to root, language), and
    what was skipped (symlinks, names that are not UTF-8). Only the files git lists (see
    listed_files); those under a folder of SKIP_DIRS are left out too (a committed
    node_modules), and a symlink, to a file or a folder, is never followed."""
    found: list[tuple[str, str]] = []
    skipped: list[dict[str, str]] = []
    wanted = set(languages)
    for raw in listed_files(folder, root):
        try:
            rel = raw.decode("utf-8")
        except UnicodeDecodeError:
            if language_for(raw.decode("utf-8", "replace")) in wanted:
                skipped.append({"path": raw.decode("utf-8", "replace"), "reason": "file name is not valid UTF-8"})
            continue
        parts = rel.split("/")
        if any(part in SKIP_DIRS for part in parts[:-1]):
            continue
        full = root / rel
        if full.is_symlink():
            if full.is_dir() or language_for(parts[-1]) in wanted:
                skipped.append({"path": rel, "reason": "symlink"})
            continue
        language = language_for(parts[-1])
        if language is None or language not in wanted or not full.is_file():  # (deleted, not yet committed)
            continue
        found.append((rel, language))
    return found, skipped


# -- parsing -----------------------------------------------------------------------------
@dataclass
class Parsed:
    path: str
    language: str
    content_hash: str
    symbols: list[Symbol]
    imports: list[ImportStatement]


@dataclass
class Plan:
    parsed: list[Parsed] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    # simple name -> qualified names, over every file of the build (unchanged ones too)
    by_simple: dict[str, set[str]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (caller, callee) qualified names


def _parse(root: Path, rel: str, language: str, known: CodegraphFileRow | None, full: bool,
           plan: Plan) -> None:
    try:
        source = read_source(root, rel)
    except CodeAnchorError as exc:
        plan.skipped.append({"path": rel, "reason": str(exc)})
        return
    if source is None:
        plan.skipped.append({"path": rel, "reason": "unreadable"})
        return
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    if known is not None and known["content_hash"] == digest and not full:
        plan.unchanged.append(rel)
        return
    try:
        symbols, imports = parse_file(rel, source, language)
    except (CodeAnchorError, ValueError, RuntimeError) as exc:  # a grammar that cannot take the file
        plan.skipped.append({"path": rel, "reason": f"parse failed: {exc}"})
        return
    symbols = [s for s in symbols if len(s.qualified) <= MAX_NAME_CHARS]
    plan.parsed.append(Parsed(rel, language, digest, symbols, imports))


def plan_build(mem: Memory, project_id: str | None, folder: Path, root: Path, languages: Sequence[str],
               full: bool) -> Plan:
    files, skipped = walk(folder, root, languages)
    known = mem.store.codegraph_files(project_id, str(root)) if project_id else {}
    plan = Plan(skipped=skipped)
    for rel, language in files:
        _parse(root, rel, language, known.get(rel), full, plan)
    seen = {rel for rel, _ in files} | {s["path"] for s in skipped}
    under = "" if folder == root else folder.relative_to(root).as_posix() + "/"
    plan.deleted = sorted(p for p, row in known.items()
                          if p not in seen and row["language"] in languages and p.startswith(under))
    for item in plan.parsed:
        for symbol in item.symbols:
            plan.by_simple.setdefault(symbol.simple, set()).add(symbol.qualified)
    for rel in plan.unchanged:
        for qualified, simple, _kind in known[rel]["symbols"]:
            plan.by_simple.setdefault(simple, set()).add(qualified)
    for item in plan.parsed:
        for symbol in item.symbols:
            for callee in symbol.calls:
                targets = plan.by_simple.get(callee, set())
                if len(targets) == 1:  # an ambiguous name is dropped (spec)
                    (target,) = targets
                    if target != symbol.qualified:  # never a self-loop
                        plan.calls.append((symbol.qualified, target))
    return plan


# -- writing -----------------------------------------------------------------------------
class _Writer:
    def __init__(self, mem: Memory, project_id: str, root: Path) -> None:
        self.mem, self.project_id, self.root = mem, project_id, root
        self.scope = Scope(project_id, include_unscoped=False)
        self.entities: dict[str, Entity] = {}
        self.now = iso(utc_now())
        self.added: list[str] = []
        self.updated: list[str] = []
        self.retire: list[str] = []

    def entity(self, name: str, entity_type: str) -> Entity:
        found = self.entities.get(name)
        if found is None:
            found = self.mem.store.get_entity(name, self.scope) or \
                self.mem.store.create_entity(name, entity_type, self.project_id)
            self.entities[name] = found
        return found

    def symbol(self, symbol: Symbol, mine: list[CodegraphObservationRow]) -> None:
        """The symbol's one observation: updated in place when its text changed, added when
        there is none with its identity prefix; others this build wrote on it are retired."""
        entity = self.entity(symbol.qualified, "code_symbol")
        content = content_of(symbol)
        same = [o for o in mine if o["content"].startswith(identity_prefix(symbol))]
        self.retire.extend(o["id"] for o in mine if o not in same[:1])
        if not same:
            self._add(entity, symbol, content)
        elif same[0]["content"] != content:
            self._correct(entity, same[0], content, symbol.path)
        elif same[0]["verification"] != verification_of(symbol.path, self.root):  # an old marker: renamed
            self.mem.store.mark_observed([same[0]["id"]], verification_of(symbol.path, self.root), self.now)

    def _add(self, entity: Entity, symbol: Symbol, content: str) -> None:
        importance = importance_prior("context", content)
        obs_id = self.mem.store.add_observation(NewObservation(
            entity_id=entity.id, content=content, observation_type="context", source="agent", importance=importance,
            evidence="observed", project_id=self.project_id))
        self.mem.store.mark_observed([obs_id], verification_of(symbol.path, self.root), self.now)
        facts.opened(self.mem, obs_id, entity, "context", content, importance, self.project_id)
        self.added.append(obs_id)

    def _correct(self, entity: Entity, row: CodegraphObservationRow, content: str, path: str) -> None:
        history = [*row["previous_versions"], {"content": row["content"], "version": row["version"],
                                               "origin_node": self.mem.settings.origin_node, "corrected_at": self.now}]
        if not self.mem.store.correct_observation(row["id"], content, history[-MAX_PREVIOUS_VERSIONS:], self.now,
                                                  row["version"]):
            return  # corrected by someone else meanwhile: theirs stands, the next build looks again
        self.mem.store.mark_observed([row["id"]], verification_of(path, self.root), self.now)
        new_fact = facts.opened(self.mem, row["id"], entity, "context", content, 0.5, self.project_id, self.now)
        if new_fact is not None:
            self.mem.store.close_facts([row["id"]], self.now, "codegraph", new_fact)
        self.updated.append(row["id"])

    def edge(self, source: Entity, target: Entity, relation_type: str) -> str:
        row = self.mem.store.upsert_relation(source.id, target.id, relation_type, False, self.project_id)
        return str(row["id"])


def _mine(mem: Memory, plan: Plan, project_id: str, root: Path,
          known: dict[str, CodegraphFileRow]) -> dict[str, list[CodegraphObservationRow]]:
    """This repository's observations of the files the build touches, by entity name: its own
    marker, and the old marker for paths this repository's recorded files hold."""
    touched = [p.path for p in plan.parsed] + plan.deleted
    markers = [verification_of(p, root) for p in touched] + [legacy_verification_of(p) for p in touched if p in known]
    mine: dict[str, list[CodegraphObservationRow]] = {}
    for row in mem.store.codegraph_observations(project_id, markers):
        mine.setdefault(row["entity_name"], []).append(row)
    return mine


def _write(mem: Memory, plan: Plan, project_id: str, root: Path) -> dict[str, Any]:
    # no session: a build is not the user's work, and recall takes its project (and "last
    # session") from the newest session; the audit event is the build's record
    store = mem.store
    writer = _Writer(mem, project_id, root)
    mine = _mine(mem, plan, project_id, root, store.codegraph_files(project_id, str(root)))
    current = {s.qualified for p in plan.parsed for s in p.symbols}
    for item in plan.parsed:
        for symbol in item.symbols:
            writer.symbol(symbol, mine.get(symbol.qualified, []))
    writer.retire.extend(o["id"] for name, rows in mine.items() if name not in current for o in rows)
    edges = [writer.edge(writer.entity(a, "code_symbol"), writer.entity(b, "code_symbol"), "uses")
             for a, b in plan.calls]
    imports = 0
    for item in plan.parsed:
        for imp in item.imports:
            source_name = f"{item.path}::{imp.module}"
            if len(source_name) > MAX_NAME_CHARS:
                continue
            edges.append(writer.edge(writer.entity(source_name, "module"),
                                     writer.entity(imp.module[:MAX_NAME_CHARS], "external_dependency"), "depends_on"))
            imports += 1
    store.touch_relations(edges, writer.now)
    retired = _retire(mem, writer, plan)
    for item in plan.parsed:
        store.save_codegraph_file(project_id, str(root), item.path, item.language, item.content_hash,
                                  [[s.qualified, s.simple, s.kind] for s in item.symbols])
    store.drop_codegraph_files(project_id, str(root), plan.deleted)
    counts = {"symbols_written": len(current), "observations_added": len(writer.added),
              "observations_updated": len(writer.updated), "symbols_retired": retired["count"],
              "call_edges_written": len(plan.calls), "import_edges_attempted": imports}
    audit_id = audit.record(mem, CLIENT, "memory.codegraph_build", {
        "project_id": project_id, "root": str(root), **counts,
        "files_parsed": len(plan.parsed), "files_deleted": len(plan.deleted), "undo_file": retired["undo_file"]})
    return {**counts, "undo_file": retired["undo_file"], "audit_id": audit_id,
            "written": writer.added + writer.updated}


def _retire(mem: Memory, writer: _Writer, plan: Plan) -> dict[str, Any]:
    ids = list(dict.fromkeys(writer.retire))
    if not ids:
        return {"count": 0, "undo_file": None}
    history, links = undo.observation_history(mem, ids)
    path = undo.save(mem, "codegraph-retire", history, created=links)
    moved = facts.supersede(mem, ids, None, "codegraph: the symbol is gone", writer.now)
    return {"count": moved, "undo_file": str(path)}


# -- the verb ----------------------------------------------------------------------------
def build(mem: Memory, *, path: str | None = None, languages: Sequence[str] | None = None,
          project: str | None = None, dry_run: bool = False, full: bool = False,
          cwd: Path | None = None) -> dict[str, Any]:
    """Parse the code under ``path`` and write (or, ``dry_run``, count) its codegraph."""
    cwd = Path(cwd or Path.cwd())
    langs = languages_from(languages)
    folder, root = place_of(path, cwd)
    name = validate.name("--project", project if project is not None else cwd.resolve().name).strip()
    existing = mem.store.get_project(name)
    if dry_run:
        project_id = existing["id"] if existing else None
        with mem.store.bind_project(project_id):
            plan = plan_build(mem, project_id, folder, root, langs, full)
        return _answer(plan, name, root, langs, dry_run=True) | {
            "symbols_found": sum(len(p.symbols) for p in plan.parsed), "call_edges_resolved": len(plan.calls),
            "import_statements": sum(len(p.imports) for p in plan.parsed)}
    row = existing or mem.store.get_or_create_project(name)
    state = mem.client(CLIENT)  # in memory only: the build's own project, for the audit events
    state.project_id, state.project_name = row["id"], row["name"]
    with mem.store.bind_project(row["id"]), mem.store.transaction():
        plan = plan_build(mem, row["id"], folder, root, langs, full)
        written = _write(mem, plan, row["id"], root)
    ids = written.pop("written")
    if mem.queues_embeddings:
        mem.queue_embeddings("observation", ids)
    return _answer(plan, name, root, langs, dry_run=False) | written


def _answer(plan: Plan, project: str, root: Path, languages: Sequence[str], *, dry_run: bool) -> dict[str, Any]:
    return {"action": "codegraph_build", "dry_run": dry_run, "project": project, "root": str(root),
            "languages": list(languages), "files_parsed": len(plan.parsed), "files_unchanged": len(plan.unchanged),
            "files_skipped": len(plan.skipped), "files_deleted": len(plan.deleted),
            "skipped": plan.skipped[:SKIPPED_LISTED]}
