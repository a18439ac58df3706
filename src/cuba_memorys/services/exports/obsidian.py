"""`cuba-memorys export DIR --obsidian`: an Obsidian vault, one note per entity and a README index.

Notes link by wiki links to the sanitised note names; ``[[`` and ``]]`` inside stored text are
neutralised so a stored value cannot forge a link. A non-empty DIR is refused unless ``apply``,
and even then only when an earlier vault export wrote it (files.target_dir): the notes this export
writes are overwritten, any other file in the vault is left alone.

(No ``from __future__ import annotations``: Python 3.11 reads ``NotRequired`` only from evaluated
annotations.)
"""

import json
from collections import defaultdict
from typing import Any, TypedDict

from cuba_memorys.graph import analysis as ga
from cuba_memorys.services.exports.files import safe_name, target_dir
from cuba_memorys.services.memory import Memory

KIND = "obsidian"
TOP = 20
MEMBERS_SHOWN = 12
ISOLATED_SHOWN = 30


class VaultWritten(TypedDict):
    action: str
    path: str
    notes: int
    communities: int
    isolated: int


def neutral(text: str) -> str:
    """Stored text with no wiki-link brackets and on one line where a line is expected."""
    return text.replace("[[", "[\u200b[").replace("]]", "]\u200b]")


def _front_value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON scalar is valid YAML


def communities(mem: Memory, scope: Any, entities: list[dict]) -> dict[str, int]:
    """Leiden community per entity id, computed now (nothing is stored)."""
    if not entities:
        return {}
    edges = mem.store.graph_edges(scope)
    ids = [e["id"] for e in entities]
    graph = ga.build(ids, ((e["from_id"], e["to_id"], e["strength"], e["bidirectional"]) for e in edges))
    return dict(zip(ids, ga.communities(graph).membership, strict=True))


def note(entity: dict, community: int | None, out: list[dict], incoming: list[dict], observations: list[dict],
         names: dict[str, str]) -> str:
    lines = ["---", f"type: {_front_value(entity['type'])}", f"importance: {entity['importance']:.3f}",
             f"accesses: {entity['accesses']}", f"community: {'null' if community is None else community}",
             f"observations: {entity['observations']}", "---", "", f"# {neutral(entity['name'])}", "",
             "## Relations", ""]
    for r in out:
        lines.append(f"- {r['type']} → [[{names[r['to_id']]}]] (strength {r['strength']:.2f})")
    for r in incoming:
        lines.append(f"- [[{names[r['from_id']]}]] {r['type']} → this (strength {r['strength']:.2f})")
    if not out and not incoming:
        lines.append("_none_")
    lines += ["", "## Observations", ""]
    by_type: dict[str, list[dict]] = defaultdict(list)
    quarantined = [o for o in observations if o.get("trust") == "quarantined"]
    for o in observations:
        if o.get("trust") != "quarantined":
            by_type[o["type"]].append(o)
    for kind in sorted(by_type):
        lines += [f"### {kind}", ""]
        lines += [f"- {o['created_at'][:10]} ({o['importance']:.2f}): {neutral(o['content'])}"
                  for o in by_type[kind]]
        lines.append("")
    if quarantined:  # kept, never searched until promoted: not to be read as facts
        lines += ["## Quarantined (not trusted)", "",
                  "> [!warning] Stored untrusted (cuba_ingesta untrusted, trust=quarantined): never returned by"
                  " search until promoted with cuba_eco action=promote. Not facts.", ""]
        lines += [f"- QUARANTINED {o['created_at'][:10]} ({o['type']}): {neutral(o['content'])}" for o in quarantined]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def index(counts: dict[str, int], entities: list[dict], groups: dict[int, list[dict]], names: dict[str, str]) -> str:
    lines = ["# Memory vault", "", f"- entities: {counts['entities']}", f"- observations: {counts['observations']}",
             f"- relations: {counts['relations']}", "", "## Most important", ""]
    lines += [f"- [[{names[e['id']]}]] ({e['importance']:.3f})" for e in entities[:TOP]]
    lines += ["", "## Communities", ""]
    # Numbered as the notes' front matter numbers them (the community id), largest first.
    shown = sorted(((cid, g) for cid, g in groups.items() if len(g) > 1), key=lambda item: (-len(item[1]), item[0]))
    for cid, members in shown:
        links = ", ".join(f"[[{names[e['id']]}]]" for e in members[:MEMBERS_SHOWN])
        more = f" and {len(members) - MEMBERS_SHOWN} more" if len(members) > MEMBERS_SHOWN else ""
        lines.append(f"- community {cid} ({len(members)}): {links}{more}")
    isolated = [e for e in entities if e["degree"] == 0]
    lines += ["", f"## Isolated ({len(isolated)})", ""]
    lines += [f"- [[{names[e['id']]}]]" for e in isolated[:ISOLATED_SHOWN]]
    return "\n".join(lines).rstrip() + "\n"


def export(mem: Memory, client: str | None, *, directory: object, apply: bool = False) -> VaultWritten:
    path = target_dir("directory", directory, KIND, apply)
    scope = mem.scope(client)
    entities = mem.store.offline_entities(scope)  # most important first
    relations = mem.store.offline_relations(scope)
    observations = mem.store.offline_observations(scope)
    taken = {"readme"}
    names = {e["id"]: safe_name(e["name"], taken) for e in entities}
    member = communities(mem, scope, entities)
    out, incoming, notes_of = defaultdict(list), defaultdict(list), defaultdict(list)
    for r in relations:
        out[r["from_id"]].append(r)
        incoming[r["to_id"]].append(r)
    for o in observations:
        notes_of[o["entity_id"]].append(o)
    groups: dict[int, list[dict]] = defaultdict(list)
    for e in entities:
        groups[member[e["id"]]].append(e)
        text = note(e, member.get(e["id"]), out[e["id"]], incoming[e["id"]], notes_of[e["id"]], names)
        (path / f"{names[e['id']]}.md").write_text(text, encoding="utf-8")
    counts = {"entities": len(entities), "observations": len(observations), "relations": len(relations)}
    (path / "README.md").write_text(index(counts, entities, groups, names), encoding="utf-8")
    return {"action": "export", "path": str(path.resolve()), "notes": len(entities),
            "communities": sum(len(g) > 1 for g in groups.values()),
            "isolated": sum(e["degree"] == 0 for e in entities)}
