"""Build the code-anchor set from a repository's own git history (issue 19, §5).

Walks the commits that touch ``src/**/*.py`` (oldest first). For each commit:

- memories: the sentences of its message, as written (sentences.split), each anchored to the
  Python symbols of the commit's diff it is about (sentences.anchors_for), the anchors taken at
  that commit: {path, symbol, lines, span_hash};
- a query, when the commit touches a symbol an earlier memory is anchored to: its subject line
  (the plain query), its diff (the context of diff-seeded recall), and as relevant the earlier
  memories anchored to any symbol the diff touches (enclosing classes included);
- the staleness set: every anchored memory labelled at the final commit: ``fresh`` when each
  anchored symbol's span hashes as it did at the memory's commit, ``changed`` when one does not,
  ``missing`` when a symbol or its file is gone (git's rename detection followed). Whether a change
  *falsifies* the memory cannot be judged automatically: "the anchored span changed" is the label.

The output is deterministic for a given history (sorted, no clock, no randomness), JSON, written
outside the tracked tree (bench/results/ is ignored by git).

    .venv/bin/python -m bench.code_anchors.build_set [--root .] [--out bench/results/code_anchors/set.json]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.code_anchors import history, sentences

from cuba_memorys.code.symbols import Symbol, find_symbol

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "bench" / "results" / "code_anchors" / "set.json"
SEVERITY = ("missing", "changed", "fresh")  # a memory's label is its worst anchor's


def _memories(index: int, sha: str, text: str, touched: list[history.Touched]) -> list[dict[str, Any]]:
    out = []
    for n, sentence in enumerate(sentences.split(text)):
        anchors = [{"path": t.path, "symbol": t.symbol, "lines": [t.line_start, t.line_end],
                    "span_hash": t.span_hash} for t in sentences.anchors_for(sentence, touched)]
        out.append({"id": f"m{index:04d}-{n:02d}", "commit": sha, "commit_index": index, "text": sentence,
                    "anchors": anchors})
    return out


def _queries(walk: list[dict[str, Any]], memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for step in walk:
        touched = {tuple(key) for key in step["touched"]}
        relevant = sorted(m["id"] for m in memories if m["commit_index"] < step["index"]
                          and any((a["path"], a["symbol"]) in touched for a in m["anchors"]))
        if relevant:
            out.append({"id": f"q{step['index']:04d}", "commit": step["sha"], "commit_index": step["index"],
                        "query": step["subject"], "diff": step["diff"], "relevant": relevant})
    return out


class _Head:
    """The final commit's symbols per path, and each earlier commit's renames up to it (cached)."""

    def __init__(self, root: Path, head: str) -> None:
        self.root, self.head = root, head
        self._symbols: dict[str, list[Symbol] | None] = {}
        self._renames: dict[str, dict[str, str]] = {}

    def label(self, commit: str, anchor: dict[str, Any]) -> str:
        if commit not in self._renames:
            self._renames[commit] = history.renames(self.root, commit, self.head)
        path = self._renames[commit].get(anchor["path"], anchor["path"])
        if path not in self._symbols:
            self._symbols[path] = history.symbols_at(self.root, self.head, path)
        symbols = self._symbols[path]
        found = find_symbol(symbols, anchor["symbol"]) if symbols else None
        if found is None:
            return "missing"
        return "fresh" if found.span_hash == anchor["span_hash"] else "changed"


def _staleness(root: Path, head: str, memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    at_head = _Head(root, head)
    out = []
    for m in memories:
        if not m["anchors"]:
            continue
        labels = [at_head.label(m["commit"], a) for a in m["anchors"]]
        out.append({"memory": m["id"], "label": min(labels, key=SEVERITY.index), "anchor_labels": labels})
    return out


def build(root: Path, pathspec: str = history.DEFAULT_PATHSPEC) -> dict[str, Any]:
    """The whole set for the history of ``root`` up to its HEAD (see the module docstring)."""
    head = history.git(root, "rev-parse", "HEAD").strip()
    walk: list[dict[str, Any]] = []
    memories: list[dict[str, Any]] = []
    unresolvable = 0
    for index, sha in enumerate(history.commits(root, pathspec)):
        diff = history.diff_of(root, sha, pathspec)
        touched, skipped = history.touched_symbols(root, sha, diff)
        unresolvable += skipped
        text = history.message(root, sha)
        walk.append({"index": index, "sha": sha, "subject": text.strip().split("\n", 1)[0], "diff": diff,
                     "touched": [list(key) for key in sorted({t.key for t in touched})]})
        memories += _memories(index, sha, text, touched)
    queries = _queries(walk, memories)
    staleness = _staleness(root, head, memories)
    stats = {
        "commits": len(walk), "memories": len(memories),
        "anchored_memories": sum(bool(m["anchors"]) for m in memories),
        "anchors": sum(len(m["anchors"]) for m in memories), "queries": len(queries),
        "relevant_pairs": sum(len(q["relevant"]) for q in queries),
        "staleness": dict(sorted(Counter(s["label"] for s in staleness).items())),
        "symbols_skipped_ambiguous_name": unresolvable,
    }
    return {"head": head, "pathspec": pathspec, "stats": stats,
            "commits": [{k: v for k, v in step.items() if k != "diff"} for step in walk],
            "memories": memories, "queries": queries, "staleness": staleness}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the git repository (default: this one)")
    parser.add_argument("--pathspec", default=history.DEFAULT_PATHSPEC)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    data = build(args.root.resolve(), args.pathspec)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False))
    print(json.dumps(data["stats"], indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
