"""The work of one import (services/sync/importer.py): a plan made by reading (what each
incoming row does here), the embeddings the plan needs, then the writes, in the importer's
transaction. The plan is made first so the wipe guard and the undo file know everything the
import will delete or rewrite before anything is written.

Per table (observations: see importer.py):
- projects and entities: by id, else by name (the smaller id kept, importer.py); counters by max.
- episodes: actors and artifacts unioned, importance and ended_at by max.
- errors: resolved is either side's; ours solution, else theirs.
- relations: by id, else by (from, to, type): strength by max.
- facts: by fact_id, inserted as they are; a closed version beats an open one; then, as the
  original does, a current fact with the same (subject, predicate) and an older observed_at is
  closed at the newer's observed_at (an older incoming one is closed itself) — among facts of one
  observation or of none: here each observation version is its own fact (predicate = its type),
  and closing one observation's fact because another about the same entity is newer would end a
  statement still true (cuba_faro as_of reads them).
- procedures: by id, else by (name, project): counts by max, the later updated_at's text.
- artifacts: by id, else by (path, project): the higher (crdt_counter, crdt_actor, version) wins;
  the version it replaces is kept in artifact_versions.
- source trust: alpha, beta and updated_at by max.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cuba_memorys.models import iso, new_id, utc_now
from cuba_memorys.services.memory import Memory
from cuba_memorys.services.sync.import_tables import Plan
from cuba_memorys.services.sync.reader import Bundle

Row = dict[str, Any]


class Job(Plan):
    """One import: :meth:`plan` (reads), :meth:`embed`, :meth:`plan_deletes`, then :meth:`apply`
    and :meth:`apply_deletes` inside the importer's transaction."""

    def __init__(self, mem: Memory, read: Bundle, mode: str, scans: dict[str, str | None] | None = None) -> None:
        super().__init__(mem, read, mode, scans)
        self.queued: list[str] = []  # observations left to the background embedding queue
        self.given_vector: list[str] = []  # observations written with a vector here: their token vectors to compute

    # -- embeddings -------------------------------------------------------------------------
    def embed(self) -> None:
        """Vectors for every observation the plan inserts or rewrites: the bundle's own when it
        carries them (same model, checked), else none yet — the rows are handed to the
        background embedding queue once committed (:meth:`hand_to_queue`; with
        CUBA_EMBED_QUEUE=off this memory's model embeds them here, before the transaction);
        none without a model."""
        if self.mem.queues_embeddings:  # a bundle carries no episode vectors: the queue embeds them too
            self.counts["embeddings_queued"] += len(self.inserts["episodes"])
        todo: list[tuple[str, tuple[str, str, str]]] = []
        for obs_id, (content, name, kind) in self.needs_vector.items():
            if obs_id in self.vectors:  # taken over from the first plan (reuse)
                continue
            carried = self.b.embeddings.get(obs_id)
            if carried is not None and obs_id in self.carried_ok:
                self.vectors[obs_id] = np.asarray(carried, dtype=np.float32).tobytes()
                self.counts["embeddings_restored"] += 1
                self.given_vector.append(obs_id)
            else:
                todo.append((obs_id, (name, kind, content)))
        if not todo:
            return
        if self.mem.queues_embeddings:
            self.queued = [obs_id for obs_id, _ in todo]
            self.counts["embeddings_queued"] += len(todo)
            return
        vectors = self.mem.embed_passages([item for _, item in todo])
        for (obs_id, _), vector in zip(todo, vectors, strict=True):
            if vector is None:
                self.counts["embeddings_pending"] += 1
            else:
                self.vectors[obs_id] = np.asarray(vector, dtype=np.float32).tobytes()
                self.counts["embeddings_computed"] += 1

    def reuse(self, first: Job) -> None:
        """Take the vectors the first plan computed (outside the write transaction) for the rows
        this plan still embeds with the same text: the plan is made again inside the transaction
        so a write that landed meanwhile is planned against, never overwritten."""
        for obs_id, (content, _, _) in self.needs_vector.items():
            if obs_id in first.vectors and first.needs_vector.get(obs_id, ("",))[0] == content:
                self.vectors[obs_id] = first.vectors[obs_id]
                kind = "embeddings_restored" if obs_id in first.carried_ok else "embeddings_computed"
                self.counts[kind] += 1
                self.given_vector.append(obs_id)

    def hand_to_queue(self) -> None:
        """After the commit: the observations without a vector, and the episodes inserted (a
        bundle carries no episode vectors), go to the background embedding queue; so do the rows
        given a vector here, for the reranker's token vectors only (a bundle carries none: they are
        derived from the text and this memory's reranker, and the original's format has no file
        for them)."""
        if self.mem.queues_embeddings:
            self.mem.queue_embeddings("observation", self.queued)
            self.mem.queue_embeddings("episode", self.created.get("episodes", []))
        self.mem.queue_tokens(self.given_vector)

    def _model(self) -> str | None:
        return self.our_model

    # -- writing ----------------------------------------------------------------------------
    def apply(self) -> None:
        store = self.store
        if self.project_rekeys:
            self._rekey_projects()
        for row in self.inserts["projects"]:
            store.sync_insert("projects", {**row, "last_active_at": row["created_at"]})
        for old_id, new_id_ in self.entity_rekeys:
            store.sync_rekey_entity(old_id, new_id_)
        for stub in self.sessions.values():
            store.sync_insert("sessions", stub)
        model = self._model() or self.b.manifest.get("embedding_model")
        for table in ("entities", "observations", "episodes", "errors", "relations", "facts", "procedures",
                      "artifacts"):
            for row in self.inserts[table]:
                vector = self.vectors.get(row["id"]) if table == "observations" else None
                store.sync_insert(table, row if vector is None else {**row, "embedding_model": model}, vector)
                self.created.setdefault(table, []).append(row["fact_id" if table == "facts" else "id"])
        for table, key, row_id, values in self.counters:
            store.sync_raise_counters(table, key, row_id, values)
        for obs_id, values in self.rewrites:
            vector = self.vectors.get(obs_id)
            store.sync_rewrite_observation(obs_id, values, vector, self._model() if vector is not None else None)
        self._refact_rewrites()
        for table, key, row_id, values in self.updates:
            store.sync_update(table, key, row_id, values)
        for artifact_id, old in self.artifact_replaced:
            self._keep_artifact_version(artifact_id, old)
        for fact_id, valid_to in self.facts_to_close:
            store.sync_close_fact(fact_id, valid_to)
        for row in self.b.source_trust:
            store.sync_upsert_trust(row)
        for obs_id, resolution in self.settled:
            self.counts["conflicts_settled"] += store.sync_settle_conflicts(obs_id, resolution)
        for obs_id, ours, theirs, their_node, project_id in self.conflicts:
            if store.sync_open_conflict(obs_id, ours, theirs, their_node, self.b.manifest_hash, project_id):
                self.counts["conflicts_opened"] += 1

    def _refact_rewrites(self) -> None:
        """A rewritten observation's facts follow its text, as after a correction: its current
        facts of another text close, and a fact of the new text is current (the bundle's own, when
        it carried one; else one is opened here)."""
        if not self.mem.settings.bitemporal:
            return
        for obs_id, values in self.rewrites:
            at = values.get("updated_at") or iso(utc_now())
            facts = self.store.facts_of(obs_id)
            current = [f for f in facts if f["is_current"]]
            for fact in current:
                if fact["object"] != values["content"]:
                    self.store.sync_close_fact(fact["fact_id"], at)
            if any(f["object"] == values["content"] for f in current):
                continue
            row = self.store.sync_local_rows("observations", [obs_id]).get(obs_id)
            if row is None:
                continue
            name, _ = self.entity_info.get(row["entity_id"]) or self._entity_name(row["entity_id"])
            self.store.sync_insert("facts", {
                "fact_id": new_id(), "subject_entity_id": row["entity_id"], "observation_id": obs_id,
                "project_id": row["project_id"], "subject": name, "predicate": values["observation_type"],
                "object": values["content"], "valid_from": at, "valid_to": None, "observed_at": iso(utc_now()),
                "confidence": max(0.0, min(1.0, float(values["importance"]))), "is_current": True,
                "created_at": iso(utc_now())})

    def _rekey_projects(self) -> None:
        """Every re-key with no project bound (row-level security would hide the rows' new id),
        then the bound project's new id bound when it was one of them (an import over MCP with
        that project active goes on writing into it)."""
        bound = self.store.rebind_project(None)
        for local, incoming in self.project_rekeys:
            self._rekey_project(local, incoming)
        moved = {local["id"]: incoming["id"] for local, incoming in self.project_rekeys}
        self.store.rebind_project(moved.get(bound, bound) if bound is not None else None)

    def _rekey_project(self, local: Row, incoming: Row) -> None:
        """Both nodes made a project of this name: keep the smaller id (incoming's) here, every
        row moving to it (the projects service's own merge, which also moves active projects)."""
        store = self.store
        parked = f"{incoming['name']} [sync {new_id()[:8]}]"
        store.sync_insert("projects", {"id": incoming["id"], "name": parked, "created_at": incoming["created_at"],
                                       "last_active_at": iso(utc_now())})
        target = {"id": incoming["id"], "name": parked}
        store.merge_projects(dict(local), target)  # type: ignore[arg-type]
        store.rename_project(incoming["id"], parked, incoming["name"])

    def _keep_artifact_version(self, artifact_id: str, old: Row) -> None:
        self.store.sync_insert("artifact_versions", {
            "artifact_id": artifact_id, "project_id": old["project_id"], "version": old["version"],
            "content": old["content"], "content_hash": old["content_hash"], "actor": old.get("crdt_actor") or "",
            "origin_node": old.get("origin_node"), "written_at": old["updated_at"], "replaced_at": iso(utc_now())})

    def apply_deletes(self) -> None:
        for table, key, row_id in self.deletes:
            if self.store.sync_delete(table, key, row_id):
                self.counts["tombstones_applied"] += 1
        project = self._project(self.b.project_id) if self.b.project_id else None
        for tombstone, applied in self.tombstones_kept:
            # a project bundle's tombstone of a row absent here: its project cannot be proved, so
            # it goes on in this project's bundles only (an `all` bundle would let it delete anywhere)
            self.store.sync_store_tombstone(tombstone, project, exact=applied,
                                            project_only=project is not None and not applied)

    # -- the undo file ----------------------------------------------------------------------
    def undo_parts(self) -> list[tuple[str, str, list[str]]]:
        """The rows this import deletes (an entity with everything it holds) or rewrites."""
        parts: dict[tuple[str, str], list[str]] = {}

        def add(table: str, key: str, ids: list[str]) -> None:
            if ids:
                parts.setdefault((table, key), []).extend(ids)

        for table, key, row_id in self.deletes:
            add(table, key, [row_id])
        doomed = [row_id for table, _, row_id in self.deletes if table == "entities"]
        if doomed:
            children = self.store.sync_children(doomed)
            add("observations", "id", [c for kids in children.values() for t, c in kids if t == "observations"])
            add("episodes", "id", [c for kids in children.values() for t, c in kids if t == "episodes"])
            add("relations", "from_entity_id", doomed)
            add("relations", "to_entity_id", doomed)
            add("facts", "subject_entity_id", doomed)
            add("entity_aliases", "entity_id", doomed)
        # a deleted observation's anchors and facts go with it (ON DELETE CASCADE): undo puts them back too
        gone = parts.get(("observations", "id"), [])
        add("facts", "observation_id", list(gone))
        add("observation_anchors", "observation_id", list(gone))
        add("observations", "id", [obs_id for obs_id, _ in self.rewrites])
        for table, key, row_id, _ in self.updates:
            if table in ("observations", "episodes", "errors", "procedures", "facts"):
                add(table, key, [row_id])
        add("facts", "fact_id", [fact_id for fact_id, _ in self.facts_to_close])
        return [(t, k, list(dict.fromkeys(v))) for (t, k), v in parts.items()]

    def created_parts(self) -> list[tuple[str, str, list[str]]]:
        keys = {"facts": "fact_id"}
        return [(t, keys.get(t, "id"), ids) for t, ids in self.created.items()
                if ids and t in ("entities", "observations", "episodes", "errors", "relations", "facts",
                                 "procedures")]
