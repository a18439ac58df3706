"""The plan of one import (what each incoming row does here), made by reading only; the rules
are in importer.py (observations) and import_rows.py (every other table)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from cuba_memorys.errors import InvalidInput
from cuba_memorys.models import iso, utc_now
from cuba_memorys.secrets_scan import find_secret
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sync.merge_rules import versions_once
from cuba_memorys.services.sync.reader import Bundle

Row = dict[str, Any]
HISTORY = 20  # previous_versions kept per observation (as a correction keeps them)
TABLES = ("projects", "entities", "observations", "episodes", "errors", "relations", "facts", "procedures",
          "artifacts")
COUNTS = ("rows_inserted", "rows_updated", "diverged", "edited_since_export", "conflicts_opened",
          "facts_superseded", "tombstones_applied", "tombstones_withheld", "tombstones_out_of_scope",
          "deleted_here_kept_deleted", "embeddings_restored", "embeddings_computed", "embeddings_queued",
          "embeddings_pending", "quarantined",
          "rows_out_of_scope", "rows_skipped", "entities_rekeyed", "projects_rekeyed", "conflicts_settled")
DELETE_ORDER = ("facts", "relations", "observations", "episodes", "errors", "procedures", "entities", "projects")


def when(value: Any) -> datetime | None:
    """A timestamp of either writer's format (ours, or RFC 3339 with Z), comparable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def later(a: Any, b: Any) -> bool:
    """Whether time ``a`` is after time ``b`` (an unknown time is never later)."""
    ta, tb = when(a), when(b)
    return ta is not None and (tb is None or ta > tb)


def refuse(what: str) -> InvalidInput:
    return InvalidInput("dir", what, "Export the bundle again on the machine that wrote it; nothing was imported.")


def secret_kind(*texts: str | None) -> str | None:
    for text in texts:
        found = find_secret(text) if text else None
        if found is not None:
            return found.kind
    return None


def _history(*lists: Iterable[Any]) -> list[Row]:
    """previous_versions of both sides, each version once, oldest first, the newest HISTORY. A
    version both machines replaced is kept as the merge driver keeps it (the later record,
    merge_rules.preferred_version), whichever side imports: else each machine keeps its own and
    their exports differ over it forever."""
    records = [[v for v in versions if isinstance(v, dict) and v.get("content")] for versions in lists]
    return versions_once(*records)[-HISTORY:]


def texts_of(versions: Iterable[Any]) -> set[str]:
    return {v["content"] for v in versions if isinstance(v, dict) and isinstance(v.get("content"), str)}


class PlanBase:
    """The plan's state, and projects, entities and observations (import_tables.py: the rest)."""

    def __init__(self, mem: Memory, read: Bundle, mode: str, scans: dict[str, str | None] | None = None) -> None:
        self.mem, self.store, self.b, self.mode = mem, mem.store, read, mode
        self.scans = {} if scans is None else scans  # text -> credential kind (shared by both plans)
        self.our_model = mem.stored_model()[0] or getattr(mem.embedder, "name", None)  # once, not per row
        node = read.manifest.get("node_id")
        self.node: str | None = node if isinstance(node, str) else None
        self.exported_at = read.manifest.get("exported_at")
        self.counts: dict[str, int] = dict.fromkeys(COUNTS, 0)
        self.quarantine_reasons: set[str] = set()
        self.project_final: dict[str, str] = {}  # incoming project id -> the id its rows get here
        self.project_now: dict[str, str] = {}  # incoming project id -> the local id before any re-key
        self.emap: dict[str, str] = {}  # incoming entity id -> local entity id
        self.entity_info: dict[str, tuple[str, str]] = {}  # local entity id -> (name, type)
        self.inserts: dict[str, list[Row]] = {t: [] for t in TABLES}
        self.project_rekeys: list[tuple[Row, Row]] = []
        self.entity_rekeys: list[tuple[str, str]] = []
        self.counters: list[tuple[str, str, str, Row]] = []
        self.rewrites: list[tuple[str, Row]] = []
        self.updates: list[tuple[str, str, str, Row]] = []
        self.artifact_replaced: list[tuple[str, Row]] = []
        self.facts_to_close: list[tuple[str, str]] = []
        self.conflicts: list[tuple[str, str, str, str | None, str | None]] = []
        self.needs_vector: dict[str, tuple[str, str, str]] = {}
        self.carried_ok: set[str] = set()
        self.vectors: dict[str, bytes] = {}
        self.deletes: list[tuple[str, str, str]] = []
        self.created: dict[str, list[str]] = {}
        self.final_text: dict[str, str] = {}  # observation id -> its text after this import
        self.open_conflicts = self.store.sync_open_conflict_ids()
        self.sessions: dict[str, Row] = {}  # sessions rows name that are not here: made as stubs
        self.vector_source: dict[str, str] = {}  # observation id -> "restored" | "computed"
        self.tombstones_kept: list[tuple[Row, bool]] = []  # (incoming tombstone, applied by this import)
        self.settled: list[tuple[str, str]] = []  # (observation id, resolution): both sides agree now

    # -- helpers ------------------------------------------------------------------------------
    def _scoped(self, rows: Iterable[Row]) -> list[Row]:
        """A project bundle carries one project: rows of another are not imported (counted)."""
        if self.b.project_id is None:
            return list(rows)
        out = []
        for row in rows:
            if row.get("project_id") == self.b.project_id:
                out.append(row)
            else:
                self.counts["rows_out_of_scope"] += 1
        return out

    def _project(self, incoming: str | None, now: bool = False) -> str | None:
        if incoming is None:
            return None
        table = self.project_now if now else self.project_final
        if incoming not in table:
            if not self.store.sync_local_rows("projects", [incoming]):
                raise refuse(f"a row names project {incoming}, which neither projects.json nor this memory has")
            self.project_now[incoming] = self.project_final[incoming] = incoming
        return table[incoming]

    def _tombstoned(self, table: str, rows: list[tuple[str, str | None]]) -> dict[str, str]:
        """When this node deleted each of these rows (those it did), by id; ``rows`` are the
        incoming (id, project id) pairs. A project_only tombstone (a project bundle's, of a row
        this node never had) binds only rows of its own project: else one project's bundle could
        keep another project's row out forever."""
        projects = dict(rows)
        ids = list(projects)
        found: dict[str, str] = {}
        for start in range(0, len(ids), 500):
            for t in self.store.tombstone_rows(table, ids[start:start + 500]):
                if t.get("project_only") and t.get("project_id") != self._project(projects[t["row_id"]]):
                    continue
                found[t["row_id"]] = t["deleted_at"]
        return found

    def _insert(self, table: str, row: Row) -> None:
        self.inserts[table].append(row)
        self.counts["rows_inserted"] += 1

    def _quarantined(self, declared: str, *texts: str | None) -> str:
        """The more restrictive of the declared trust and the credential scan (of every text the
        row carries: its history is shown to readers too)."""
        kind = None
        for text in texts:
            if text and text not in self.scans:
                self.scans[text] = secret_kind(text)
            kind = kind or (self.scans.get(text) if text else None)
        if kind is not None:
            self.quarantine_reasons.add(kind)
        if kind is not None or declared == "quarantined":
            self.counts["quarantined"] += 1
            return "quarantined"
        return "trusted"

    # -- the plan -----------------------------------------------------------------------------
    def _projects(self) -> None:
        rows = sorted(self._scoped_projects(), key=lambda p: p["id"])
        local = self.store.sync_local_rows("projects", [p["id"] for p in rows])
        for p in rows:
            if p["id"] in local:
                self.project_now[p["id"]] = self.project_final[p["id"]] = p["id"]
                continue
            named = self.store.sync_project_named(p["name"])
            taken = next((q for q in self.inserts["projects"] if q["name"] == p["name"]), None)
            if taken is not None:  # two ids for one name in a merged bundle: the first (smaller) kept
                self.project_now[p["id"]] = self.project_final[p["id"]] = taken["id"]
            elif named is None:
                self._insert("projects", {"id": p["id"], "name": p["name"], "created_at": p["created_at"]})
                self.project_now[p["id"]] = self.project_final[p["id"]] = p["id"]
            elif p["id"] < named["id"]:
                self.project_rekeys.append((named, p))
                self.project_now[p["id"]], self.project_final[p["id"]] = named["id"], p["id"]
                self.project_final[named["id"]] = p["id"]
                self.counts["projects_rekeyed"] += 1
            else:
                self.project_now[p["id"]] = self.project_final[p["id"]] = named["id"]

    def _scoped_projects(self) -> list[Row]:
        if self.b.project_id is None:
            return self.b.projects
        return [p for p in self.b.projects if p["id"] == self.b.project_id]

    def _entities(self) -> None:
        entities = sorted(self._scoped(self.b.entities), key=lambda e: e["id"])
        local = self.store.sync_local_rows("entities", [e["id"] for e in entities])
        gone = self._tombstoned("entities", [(e["id"], e["project_id"]) for e in entities if e["id"] not in local])
        planned: dict[tuple[str, str | None], str] = {}
        for e in entities:
            final, now = self._project(e["project_id"]), self._project(e["project_id"], now=True)
            if e["id"] in local:
                self._entity_counters(e["id"], e, local[e["id"]])
                self.emap[e["id"]] = e["id"]
            elif (e["name"], final) in planned:
                self.emap[e["id"]] = planned[(e["name"], final)]
            elif (named := self.store.sync_entity_named(e["name"], now)) is not None:
                if e["id"] < named["id"]:
                    self.entity_rekeys.append((named["id"], e["id"]))
                    self.counts["entities_rekeyed"] += 1
                    self.emap[e["id"]] = self.emap[named["id"]] = e["id"]
                else:
                    self.emap[e["id"]] = named["id"]
                self._entity_counters(self.emap[e["id"]], e, None)
            elif e["id"] in gone and not self._edited_after(e, gone[e["id"]]):
                self.counts["deleted_here_kept_deleted"] += 1
                continue
            else:
                self._insert("entities", {"id": e["id"], "name": e["name"], "entity_type": e["entity_type"],
                                          "importance": e["importance"], "access_count": e["access_count"],
                                          "project_id": final, "created_at": e["created_at"],
                                          "updated_at": e["created_at"]})
                self.emap[e["id"]] = e["id"]
            planned[(e["name"], final)] = self.emap[e["id"]]
            self.entity_info[self.emap[e["id"]]] = (e["name"], e["entity_type"])

    @staticmethod
    def _edited_after(entity: Row, deleted_at: str) -> bool:
        """An entity deleted here comes back only when the sender wrote to it after the delete."""
        return any(later(o.get("updated_at") or o["created_at"], deleted_at) for o in entity["observations"])

    def _entity_counters(self, entity_id: str, incoming: Row, local: Row | None) -> None:
        if local is None or incoming["importance"] > local["importance"] \
                or incoming["access_count"] > local["access_count"]:
            self.counters.append(("entities", "id", entity_id, {"importance": incoming["importance"],
                                                                 "access_count": incoming["access_count"]}))

    def _observations(self) -> None:
        pairs = [(e, o) for e in self.b.entities if e["id"] in self.emap for o in e["observations"]]
        local = self.store.sync_local_rows("observations", [o["id"] for _, o in pairs])
        gone = self._tombstoned("observations", [(o["id"], o.get("project_id")) for _, o in pairs
                                                  if o["id"] not in local])
        for entity, obs in pairs:
            entity_id = self.emap[entity["id"]]
            here = local.get(obs["id"])
            if here is None and obs["id"] in gone and not later(obs.get("updated_at") or obs["created_at"],
                                                                  gone[obs["id"]]):
                self.counts["deleted_here_kept_deleted"] += 1
            elif here is None:
                self._new_observation(entity_id, obs)
            else:
                self._known_observation(entity_id, obs, here)

    def _new_observation(self, entity_id: str, obs: Row) -> None:
        model = self.b.manifest.get("embedding_model")
        self._insert("observations", {
            "id": obs["id"], "entity_id": entity_id, "content": obs["content"],
            "observation_type": obs["observation_type"], "source": obs["source"], "importance": obs["importance"],
            "tags": obs["tags"], "project_id": self._project(obs["project_id"]),
            "session_id": self._session(obs["session_id"], obs["project_id"], obs["created_at"]),
            "created_at": obs["created_at"], "updated_at": obs.get("updated_at") or obs["created_at"],
            "version": obs["version"] or 1, "previous_versions": _history(obs["previous_versions"]),
            "origin_node": obs["origin_node"] or obs["crdt_actor"] or self.node, "evidence": obs["evidence"],
            "verification": obs["verification"], "verified_at": obs["verified_at"],
            "trust": self._quarantined(obs["trust"], obs["content"], *texts_of(obs["previous_versions"]))})
        self._wants_vector(entity_id, obs["id"], obs["content"], model)

    def _wants_vector(self, entity_id: str, obs_id: str, content: str, model: Any = None) -> None:
        name, kind = self.entity_info.get(entity_id) or self._entity_name(entity_id)
        self.needs_vector[obs_id] = (content, name, kind)
        self.final_text[obs_id] = content
        if model and model == self.our_model and obs_id in self.b.embeddings:
            self.carried_ok.add(obs_id)

    def _session(self, session_id: str | None, project: str | None, at: str) -> str | None:
        """Keep the row's session: one made on another machine is recorded here as a closed stub
        (the bundle carries no sessions), so both machines export the row alike."""
        if session_id is None:
            return None
        if session_id not in self.sessions and not self.store.sync_local_rows("sessions", [session_id]):
            self.sessions[session_id] = {"id": session_id, "name": f"session on {self.node or 'another node'}",
                                         "project_id": self._project(project), "started_at": at, "ended_at": at}
        elif session_id in self.sessions:
            stub = self.sessions[session_id]
            stub["started_at"], stub["ended_at"] = min(stub["started_at"], at), max(stub["ended_at"], at)
        return session_id

    def _entity_name(self, entity_id: str) -> tuple[str, str]:
        row = self.store.sync_local_rows("entities", [entity_id]).get(entity_id)
        return (row["name"], row["entity_type"]) if row else ("", "concept")

    def _known_observation(self, entity_id: str, obs: Row, here: Row) -> None:
        self.final_text[obs["id"]] = here["content"]
        if obs["content"] == here["content"]:
            if obs["id"] in self.open_conflicts:  # the other side settled it our way
                self.settled.append((obs["id"], "ours"))
            self._same_text(obs, here)
            return
        if obs["content"] in texts_of(here["previous_versions"]):
            return  # theirs is an older version of ours: nothing to do
        later_edit = here["content"] in texts_of(obs["previous_versions"])
        if self.mode == "overwrite" or (self.mode == "merge" and later_edit):
            self._take_theirs(entity_id, obs, here, later_edit)
            if later_edit and obs["id"] in self.open_conflicts:  # settled elsewhere, and this is the result
                self.settled.append((obs["id"], "theirs"))
            return
        self.counts["diverged"] += 1
        if later(here.get("updated_at"), self.exported_at):
            self.counts["edited_since_export"] += 1
        self.conflicts.append((obs["id"], here["content"], obs["content"], obs["crdt_actor"] or obs["origin_node"]
                               or self.node, here["project_id"]))

    def _same_text(self, obs: Row, here: Row) -> None:
        """Both machines hold this text: its bookkeeping is taken as the merge driver merges it
        (importance, version and updated_at the larger; previous_versions one record per
        version, the later one), so both export the row alike. Keeping ours instead leaves the
        machines exporting two records of a version both replaced, forever (issue 30 item 3)."""
        if obs["importance"] > here["importance"]:
            self.counters.append(("observations", "id", obs["id"], {"importance": obs["importance"]}))
        adopted: Row = {}
        history = _history(here["previous_versions"], obs["previous_versions"])
        if history != here["previous_versions"]:
            adopted["previous_versions"] = history
            arriving = texts_of(history) - texts_of(here["previous_versions"])
            # their history is shown to readers too: a credential in it quarantines the row
            if arriving and here["trust"] != "quarantined" and \
                    self._quarantined("trusted", *sorted(arriving)) == "quarantined":
                adopted["trust"] = "quarantined"
        if int(obs["version"] or 1) > int(here["version"] or 1):
            adopted["version"] = int(obs["version"])
        if later(obs.get("updated_at"), here.get("updated_at")):
            adopted["updated_at"] = obs["updated_at"]
        if adopted:
            self.updates.append(("observations", "id", obs["id"], adopted))

    def _take_theirs(self, entity_id: str, obs: Row, here: Row, later_edit: bool) -> None:
        mine = [] if later_edit else [{"content": here["content"], "version": here["version"],
                                       "origin_node": here["origin_node"], "replaced_at": iso(utc_now())}]
        self.rewrites.append((obs["id"], {
            "content": obs["content"], "observation_type": obs["observation_type"], "tags": obs["tags"],
            "evidence": obs["evidence"], "verification": obs["verification"], "verified_at": obs["verified_at"],
            "trust": self._quarantined(obs["trust"], obs["content"], *texts_of(obs["previous_versions"])),
            "version": max(int(here["version"]) + (0 if later_edit else 1), int(obs["version"] or 1)),
            "previous_versions": _history(here["previous_versions"], obs["previous_versions"], mine),
            "updated_at": obs.get("updated_at") or iso(utc_now()),
            "importance": max(here["importance"], obs["importance"])}))
        self.counts["rows_updated"] += 1
        self._wants_vector(entity_id, obs["id"], obs["content"])

    def _file_conflicts(self) -> None:
        """Rows the merge driver found changed on both sides: theirs waits as a conflict."""
        for entity in self.b.entities:
            for c in entity["conflicts"]:
                theirs = c["theirs"]["content"]
                ours = self.final_text.get(c["observation_id"])
                if ours is None:
                    here = self.store.sync_local_rows("observations", [c["observation_id"]])
                    ours = here[c["observation_id"]]["content"] if here else None
                if ours is None or ours == theirs:
                    continue
                self.counts["diverged"] += 1
                self.conflicts.append((c["observation_id"], ours, theirs, c["their_node"],
                                       self._project(entity["project_id"])))
