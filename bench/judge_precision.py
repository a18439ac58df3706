"""How often the text judge is right when it speaks: its `contradicts` and `supports` on labelled
(premise, hypothesis) pairs, against the text judge of an earlier revision measured in the same run.

Pairs: the public NLI dev splits in ../shared/bench/nli-dev (SICK trial, XNLI en/es dev;
evaluation only, see its PROVENANCE.md) and the project's own pairs (tests/grounding_pairs.py).
Each pair is judged as verify judges it: the hypothesis is the claim, the premise the stored
evidence. Rates carry 95% Wilson intervals. Then cuba_faro mode=verify end to end, with no model
judge, on the held-out corpus (tests/grounding_heldout.py: 20 facts, 30 claims) in a fresh
embedded store: the grounding level of every claim.

    .venv/bin/python bench/judge_precision.py [--nli-dir ../shared/bench/nli-dev] [--baseline-rev c43d708]
        [--out judge.json] [--show-errors]

The figures are in docs/benchmarks.md ("Verify judges: the text rules").
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cuba_memorys.judge.heuristic import HeuristicJudge  # noqa: E402
from grounding_heldout import FACTS, FALSE_CLAIMS, TRUE_CLAIMS, UNSETTLED_CLAIMS  # noqa: E402
from grounding_pairs import PAIRS  # noqa: E402

SPLITS = ("sick-dev", "xnli_en-dev", "xnli_es-dev")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 0.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def load_pairs(nli_dir: Path) -> dict[str, list[tuple[str, str, str]]]:
    """(premise, hypothesis, label) per source."""
    sources: dict[str, list[tuple[str, str, str]]] = {}
    for split in SPLITS:
        path = nli_dir / f"{split}.jsonl.gz"
        if path.exists():
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                rows = [json.loads(line) for line in fh]
            sources[split] = [(r["premise"], r["hypothesis"], r["label"]) for r in rows]
    sources["project"] = [(evidence, claim, label) for evidence, claim, label, _, _ in PAIRS]
    return sources


def baseline_report(rev: str, nli_dir: Path) -> dict:
    """This script's figures for the package of ``rev`` (its whole src, text rules and verify
    alike), measured in a subprocess on the same pairs: the "before" of the same run."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        out = Path(tmp) / "baseline.json"
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        subprocess.run([sys.executable, __file__, "--nli-dir", str(nli_dir), "--baseline-rev", "", "--out", str(out)],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def measure(judge, pairs: list[tuple[str, str, str]], errors: list | None = None) -> dict:
    counts: Counter = Counter()
    for premise, hypothesis, label in pairs:
        verdict = judge.judge_claim(hypothesis, premise)
        counts[(label, verdict.verdict)] += 1
        wrong = (verdict.verdict == "contradicts" and label != "contradiction") or (
            verdict.verdict == "supports" and label != "entailment")
        if wrong and errors is not None:
            errors.append({"label": label, "verdict": verdict.verdict, "premise": premise,
                           "hypothesis": hypothesis, "reason": verdict.reason})
    labels = Counter(label for _, _, label in pairs)

    def said(verdict: str, label: str) -> int:
        return counts[(label, verdict)]

    contradicts = sum(said("contradicts", lab) for lab in labels)
    supports = sum(said("supports", lab) for lab in labels)
    neutral_contra = said("contradicts", "neutral")
    return {
        "pairs": dict(labels),
        "contradicts": {"total": contradicts, "on_entailment": said("contradicts", "entailment"),
                        "on_neutral": neutral_contra,
                        "neutral_rate": round(neutral_contra / labels["neutral"], 4) if labels["neutral"] else 0,
                        "neutral_rate_ci95": wilson(neutral_contra, labels["neutral"]),
                        "recall": round(said("contradicts", "contradiction") / labels["contradiction"], 4)
                        if labels["contradiction"] else 0,
                        "precision": round(said("contradicts", "contradiction") / contradicts, 4)
                        if contradicts else None},
        "supports": {"total": supports,
                     "false": said("supports", "neutral") + said("supports", "contradiction"),
                     "recall": round(said("supports", "entailment") / labels["entailment"], 4)
                     if labels["entailment"] else 0,
                     "false_rate_ci95": wilson(said("supports", "neutral") + said("supports", "contradiction"),
                                               labels["neutral"] + labels["contradiction"])},
    }


def verify_heldout() -> dict:
    """cuba_faro mode=verify, no model judge, on the held-out corpus in a fresh embedded store."""
    from cuba_memorys.config import Settings
    from cuba_memorys.services.memory import Memory
    from cuba_memorys.services.observations import write
    from cuba_memorys.services.search import verify

    with tempfile.TemporaryDirectory() as tmp:
        base = Settings.from_env()
        # no model judge: no NLI model (a directory that is not there), no CLI judge (where the setting exists)
        changes = {"data_dir": Path(tmp), "database_url": "", "nli_path": Path(tmp) / "no-nli",
                   "undo_dir": Path(tmp) / "undo"}
        if hasattr(base, "juez_cli"):
            changes["juez_cli"] = "none"
        settings = replace(base, **changes)
        mem = Memory.open(settings)
        try:
            for entity, content in FACTS:
                write.add(mem, None, entity_name=entity, content=content)
            groups = {"true": TRUE_CLAIMS, "false": [c for c, _ in FALSE_CLAIMS], "unsettled": UNSETTLED_CLAIMS}
            out = {}
            for name, claims in groups.items():
                levels = {c: verify.verify(mem, None, c)["grounding"] for c in claims}
                out[name] = {"levels": dict(Counter(levels.values())), "by_claim": levels}
            return out
        finally:
            mem.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nli-dir", type=Path, default=ROOT.parent / "shared" / "bench" / "nli-dev")
    parser.add_argument("--baseline-rev", default="c43d708",
                        help="the git revision whose package to compare (empty: none)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--show-errors", action="store_true", help="print every false decision")
    args = parser.parse_args()
    sources = load_pairs(args.nli_dir)
    errors: list = []
    report: dict = {"baseline_rev": args.baseline_rev or None, "sources": {}}
    for name, pairs in sources.items():
        report["sources"][name] = {"current": measure(HeuristicJudge(), pairs, errors)}
    report["verify_heldout"] = verify_heldout()
    if args.baseline_rev:
        before = baseline_report(args.baseline_rev, args.nli_dir)
        for name in report["sources"]:
            report["sources"][name]["baseline"] = before["sources"][name]["current"]
        report["verify_heldout_baseline"] = before["verify_heldout"]
    if args.show_errors:
        for error in errors:
            print(json.dumps(error, ensure_ascii=False))
    text = json.dumps(report, indent=2, ensure_ascii=False)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
