"""The plan of an import for the tables beside entities and observations (rules: import_rows.py's
docstring), and the plan of its deletes (importer.py: the wipe guard, withheld tombstones)."""

from __future__ import annotations

import hashlib
from typing import Any

from cuba_memorys.services.sync.import_plan import DELETE_ORDER, PlanBase, later, refuse, secret_kind, texts_of

Row = dict[str, Any]


class Plan(PlanBase):
    def plan(self) -> None:
        self._projects()
        self._entities()
        self._observations()
        self._file_conflicts()
        self._episodes()
        self._errors()
        self._relations()
        self._facts()
        self._procedures()
        self._artifacts()

    def _entity(self, incoming: str | None) -> str | None:
        """The local id of an entity a row names: mapped by this import, or already here."""
        if incoming is None:
            return None
        if incoming in self.emap:
            return self.emap[incoming]
        if self.store.sync_local_rows("entities", [incoming]):
            self.emap[incoming] = incoming
            return incoming
        return None

    def _new_rows(self, table: str, rows: list[Row], key: str = "id") -> tuple[dict[str, Row], dict[str, str]]:
        """(the local rows these ids name, when this node deleted the others it did)."""
        local = self.store.sync_local_rows(table, [r[key] for r in rows])
        gone = self._tombstoned(table, [(r[key], r.get("project_id")) for r in rows if r[key] not in local])
        return local, gone

    def _kept_deleted(self, gone: dict[str, str], row_id: str, written_at: Any) -> bool:
        if row_id in gone and not later(written_at, gone[row_id]):
            self.counts["deleted_here_kept_deleted"] += 1
            return True
        return False

    def _episodes(self) -> None:
        rows = self._scoped(self.b.episodes)
        local, gone = self._new_rows("episodes", rows)
        for ep in rows:
            entity = self._entity(ep["entity_id"])
            here = local.get(ep["id"])
            if here is not None:
                merged = {"actors": sorted(set(here["actors"]) | set(ep["actors"])),
                          "artifacts": sorted(set(here["artifacts"]) | set(ep["artifacts"])),
                          "importance": max(here["importance"], ep["importance"]),
                          "ended_at": max((t for t in (here["ended_at"], ep["ended_at"]) if t), default=None)}
                changed = {k: v for k, v in merged.items() if v != here[k]
                           and not (k in ("actors", "artifacts") and sorted(here[k]) == v)}
                if changed:
                    self.updates.append(("episodes", "id", ep["id"], changed))
            elif entity is None:
                self.counts["rows_skipped"] += 1
            elif not self._kept_deleted(gone, ep["id"], ep["ended_at"] or ep["started_at"]):
                self._insert("episodes", {
                    "id": ep["id"], "entity_id": entity, "content": ep["content"], "actors": ep["actors"],
                    "artifacts": ep["artifacts"], "importance": ep["importance"],
                    "project_id": self._project(ep["project_id"]), "started_at": ep["started_at"],
                    "ended_at": ep["ended_at"], "trust": self._quarantined("trusted", ep["content"]),
                    "created_at": ep["started_at"]})

    def _errors(self) -> None:
        rows = self._scoped(self.b.errors)
        local, gone = self._new_rows("errors", rows)
        for err in rows:
            here = local.get(err["id"])
            if here is not None:
                changed: Row = {}
                if err["resolved"] and not here["resolved"]:
                    changed["resolved"] = True
                if not here["solution"] and err["solution"]:
                    changed["solution"] = err["solution"]
                if changed:
                    self.updates.append(("errors", "id", err["id"], changed))
            elif not self._kept_deleted(gone, err["id"], err["created_at"]):
                self._insert("errors", {
                    "id": err["id"], "error_type": err["error_type"], "error_message": err["error_message"],
                    "solution": err["solution"], "resolved": bool(err["resolved"]), "project": err["project"],
                    "project_id": self._project(err["project_id"]), "created_at": err["created_at"],
                    "trust": self._quarantined("trusted", err["error_message"], err["solution"])})

    def _relations(self) -> None:
        rows = self._scoped(self.b.relations)
        local, gone = self._new_rows("relations", rows)
        planned: set[tuple[str, str, str]] = set()
        for rel in rows:
            if rel["id"] in local:
                if rel["strength"] > local[rel["id"]]["strength"]:
                    self.counters.append(("relations", "id", rel["id"], {"strength": rel["strength"]}))
                continue
            a, b = self._entity(rel["from_entity"]), self._entity(rel["to_entity"])
            if a is None or b is None or a == b:
                self.counts["rows_skipped"] += 1
                continue
            twin = self.store.sync_relation_between(a, b, rel["relation_type"])
            if twin is not None:
                self.counters.append(("relations", "id", twin, {"strength": rel["strength"]}))
            elif (a, b, rel["relation_type"]) in planned:
                continue
            elif not self._kept_deleted(gone, rel["id"], rel["created_at"]):
                planned.add((a, b, rel["relation_type"]))
                self._insert("relations", {
                    "id": rel["id"], "from_entity_id": a, "to_entity_id": b, "relation_type": rel["relation_type"],
                    "strength": rel["strength"], "bidirectional": bool(rel["bidirectional"]),
                    "project_id": self._project(rel["project_id"]), "created_at": rel["created_at"],
                    "provenance": rel["provenance"]})

    def _fact_links(self) -> dict[tuple[str, str, str], str]:
        """(local entity id, observation type, text) -> the observation that says it, for every
        observation this import keeps: a fact of the bundle is linked to its observation here as it
        was on the sender (facts.json carries no link; each observation version is one fact)."""
        kept = {o["id"] for o in self.inserts["observations"]} | set(self.final_text)
        links: dict[tuple[str, str, str], str] = {}
        for entity in self.b.entities:
            local = self.emap.get(entity["id"])
            if local is None:
                continue
            for obs in entity["observations"]:
                if obs["id"] not in kept:
                    continue
                for text in (obs["content"], *sorted(texts_of(obs["previous_versions"]))):
                    links.setdefault((local, obs["observation_type"], text), obs["id"])
        return links

    def _facts(self) -> None:
        rows = self._scoped(self.b.facts)
        local, gone = self._new_rows("facts", rows, "fact_id")
        links = self._fact_links()
        opened: list[Row] = []
        for fact in rows:
            here = local.get(fact["fact_id"])
            closed = not fact["is_current"] or fact["valid_to"] is not None
            if here is not None:
                self._known_fact(fact, here, closed)
                continue
            subject = self._entity(fact["subject_entity_id"])
            if subject is None:
                self.counts["rows_skipped"] += 1
                continue
            if self._kept_deleted(gone, fact["fact_id"], fact["observed_at"]):
                continue
            valid_to = fact["valid_to"] or (fact["observed_at"] if closed else None)
            if valid_to is not None and later(fact["valid_from"], valid_to):
                valid_to = fact["valid_from"]
            row = {"fact_id": fact["fact_id"], "subject_entity_id": subject,
                   "observation_id": links.get((subject, fact["predicate"], fact["object"])),
                   "project_id": self._project(fact["project_id"]), "subject": fact["subject"],
                   "predicate": fact["predicate"], "object": fact["object"], "valid_from": fact["valid_from"],
                   "valid_to": valid_to, "observed_at": fact["observed_at"], "confidence": fact["confidence"],
                   "is_current": not closed, "created_at": fact["created_at"]}
            self._insert("facts", row)
            if not closed and row["observation_id"] is None:  # a fact of an observation: see _supersede
                opened.append(row)
        self._supersede(opened)

    def _known_fact(self, fact: Row, here: Row, closed: bool) -> None:
        """The same fact (one id, from one node), as the merge driver merges it: a closed
        version beats an open one, and of two closed ones the later valid_to wins. (Each
        machine that replaced the observation closed its fact at its own time: keeping ours
        would leave the machines exporting two valid_to for it, forever.)"""
        if not closed:
            return
        if here["is_current"]:
            self.facts_to_close.append((fact["fact_id"], fact["valid_to"] or fact["observed_at"]))
        elif later(fact["valid_to"], here["valid_to"]) and str(fact["valid_to"]) >= str(here["valid_from"]):
            # (the second test is the table's own check, which compares the texts)
            self.updates.append(("facts", "fact_id", fact["fact_id"], {"valid_to": fact["valid_to"]}))

    def _supersede(self, opened: list[Row]) -> None:
        """By (subject, predicate) as the original: the newest observed_at stays current, older
        current ones close at its observed_at — among facts of no observation. (Every version of
        an observation is a fact with predicate = its type: two observations of one entity are two
        statements, both true; an observation's facts close with its own history.)"""
        if not opened:
            return
        pairs = [(f["subject"], f["predicate"]) for f in opened]
        here = [f for f in self.store.sync_current_facts(pairs) if f["observation_id"] is None]
        fresh = {f["fact_id"] for f in opened}
        groups: dict[tuple[str, str], list[Row]] = {}
        for f in [*here, *opened]:
            groups.setdefault((f["subject"], f["predicate"]), []).append(f)
        for group in groups.values():
            newest = max(group, key=lambda f: (str(f["observed_at"]), f["fact_id"]))
            for f in group:
                if f is newest:
                    continue
                self.counts["facts_superseded"] += 1
                end = newest["observed_at"] if not later(f["valid_from"], newest["observed_at"]) else f["valid_from"]
                if f["fact_id"] in fresh:
                    f["is_current"], f["valid_to"] = False, end
                else:
                    self.facts_to_close.append((f["fact_id"], end))

    def _procedures(self) -> None:
        rows = self._scoped(self.b.procedures)
        local, gone = self._new_rows("procedures", rows)
        for proc in rows:
            pid = self._project(proc["project_id"])
            here_id = proc["id"] if proc["id"] in local else self.store.sync_procedure_named(proc["name"], pid)
            if here_id is None:
                if not self._kept_deleted(gone, proc["id"], proc["updated_at"]):
                    self._insert("procedures", {k: proc[k] for k in (
                        "id", "name", "steps", "trigger_context", "preconditions", "verification", "success_count",
                        "failure_count", "last_outcome", "last_used_at", "created_at", "updated_at")}
                        | {"project_id": pid, "origin_node": self.node})
                continue
            here = local.get(here_id) or self.store.sync_local_rows("procedures", [here_id])[here_id]
            self.counters.append(("procedures", "id", here_id, {"success_count": proc["success_count"],
                                                                "failure_count": proc["failure_count"]}))
            if later(proc["updated_at"], here["updated_at"]):
                self.updates.append(("procedures", "id", here_id, {k: proc[k] for k in (
                    "steps", "trigger_context", "preconditions", "verification", "last_outcome", "last_used_at",
                    "updated_at")}))

    def _artifacts(self) -> None:
        for art in self._scoped(self.b.artifacts):
            pid = self._project(art["project_id"])
            here = self.store.sync_local_rows("artifacts", [art["id"]]).get(art["id"]) \
                or self.store.sync_artifact_at(art["path"], pid)
            digest = hashlib.sha256(art["content"].encode("utf-8")).hexdigest()
            kind = secret_kind(art["content"])
            if kind is not None:  # artifacts have no quarantine: one that carries a credential stays out
                self.quarantine_reasons.add(kind)
                self.counts["quarantined"] += 1
                continue
            actor = art["crdt_actor"] or art["origin_node"] or self.node or ""
            values = {"content": art["content"], "content_hash": digest, "version": art["version"],
                      "origin_node": art["origin_node"], "crdt_actor": actor, "crdt_counter": art["crdt_counter"],
                      "updated_at": art["updated_at"]}
            if here is None:
                self._insert("artifacts", {"id": art["id"], "project_id": pid, "path": art["path"],
                                           "created_at": art["updated_at"], **values})
            elif (art["crdt_counter"] or 0, actor, art["version"]) > \
                    (here["crdt_counter"] or 0, here["crdt_actor"] or "", here["version"]):
                if here["content"] != art["content"]:
                    self.artifact_replaced.append((here["id"], here))
                values["version"] = max(int(art["version"]), int(here["version"]) + 1)
                self.updates.append(("artifacts", "id", here["id"], values))
                self.counts["rows_updated"] += 1

    # -- deletes ------------------------------------------------------------------------------
    def plan_deletes(self, withhold: bool) -> None:
        """The tombstones this import applies: each names one row here, the bundle does not carry
        that row alive (an edit beats a delete), the row was not written after the delete, and an
        entity's tombstone waits while it has children here this import does not delete. The
        tombstones applied, and those of rows this node never had, are kept (see sync_store_tombstone)."""
        alive = {t: {r["id"] for r in getattr(self.b, t)} for t in ("episodes", "errors", "relations", "procedures",
                                                                     "projects")}
        alive["entities"] = {e["id"] for e in self.b.entities}
        alive["observations"] = {o["id"] for o in self.b.observations}
        alive["facts"] = {f["fact_id"] for f in self.b.facts}
        named: dict[str, dict[str, Row]] = {}
        for t in self._scoped_tombstones():
            if t["row_id"] not in alive[t["table_name"]]:
                named.setdefault(t["table_name"], {})[t["row_id"]] = t
        planned: list[tuple[str, str, str]] = []
        absent: list[Row] = []
        for table in DELETE_ORDER:
            ids = named.get(table, {})
            here = self.store.sync_local_rows(table, list(ids)) if ids else {}
            for row_id, t in sorted(ids.items()):
                row = here.get(row_id)
                if row is not None and not self._in_scope(table, row):
                    self.counts["tombstones_out_of_scope"] += 1
                elif row is None:
                    absent.append(t)
                elif later(row.get("updated_at") or row.get("created_at"), t["deleted_at"]) or self._holds_more(
                        table, row_id, {(tb, i) for tb, _, i in planned}):
                    self.counts["tombstones_withheld"] += 1
                else:
                    planned.append((table, "fact_id" if table == "facts" else "id", row_id))
        if withhold:
            self.counts["tombstones_withheld"] += len(planned)
            planned = []
        self.deletes = planned
        if not withhold:  # withhold: nothing of the deletes is taken, nor passed on
            self.tombstones_kept = [(t, False) for t in absent] + [(named[tb][i], True) for tb, _, i in planned]

    def _scoped_tombstones(self) -> list[Row]:
        return self.b.tombstones  # (filtered per local row by _in_scope: a tombstone names no project)

    def _in_scope(self, table: str, row: Row) -> bool:
        """Whether a project bundle may delete this local row: only a row of the bundle's project
        (under the id it has here now, or the one a re-key gives it). Export writes only its own
        project's tombstones, but a hand edit or a merge can put another's in the file, and a
        project bundle must not reach rows it does not carry. A bundle of every project may."""
        project = self.b.project_id
        if project is None:
            return True
        ours = {project, self.project_now.get(project, project), self.project_final.get(project, project)}
        return (row["id"] if table == "projects" else row.get("project_id")) in ours

    def _holds_more(self, table: str, row_id: str, doomed: set[tuple[str, str]]) -> bool:
        """An entity with children here this import does not delete (the sender did not name
        them, or they were written here after its delete), or a project still holding entities,
        keeps them: its tombstone is withheld."""
        if table == "entities":
            return any(kid not in doomed for kid in self.store.sync_children([row_id])[row_id])
        if table == "projects":
            return bool(self.store.sync_entities(row_id, False))
        return False

    def deleting(self) -> tuple[int, int]:
        """(rows the planned deletes remove, cascades included; observations among them)."""
        entities = [row_id for table, _, row_id in self.deletes if table == "entities"]
        kids = self.store.sync_children(entities) if entities else {}
        named = {(t, row_id) for t, _, row_id in self.deletes}
        cascaded = [k for children in kids.values() for k in children if k not in named]
        observations = sum(t == "observations" for t, _, _ in self.deletes)
        observations += sum(t == "observations" for t, _ in cascaded)
        return len(self.deletes) + len(cascaded), observations


__all__ = ["Plan", "refuse"]
