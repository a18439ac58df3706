"""How fast `codegraph build` is: files/s and symbols/s over this project's own src/, cold (a new
store, every file parsed and written) and warm (the same store again, every file unchanged),
against the baseline of parsing alone (read + tree-sitter + symbols, no store), measured in
the same run. Each figure is the median of --runs runs; SQLite, the default store, in a
temporary folder; no embedding model (the build never loads one).

    .venv/bin/python bench/codegraph_speed.py [--path src] [--runs 3]

The numbers are in docs/benchmarks.md ("Codegraph build").
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from cuba_memorys.code.repo import read_source, repo_root
from cuba_memorys.code.symbols import parse_file
from cuba_memorys.config import Settings
from cuba_memorys.services.code import codegraph
from cuba_memorys.services.memory import Memory


def parse_only(folder: Path, root: Path) -> tuple[int, int]:
    files, _ = codegraph.walk(folder, root, codegraph.languages_from(None))
    symbols = 0
    for rel, language in files:
        source = read_source(root, rel)
        if source is not None:
            symbols += len(parse_file(rel, source, language)[0])
    return len(files), symbols


def one_store_run(folder: Path, root: Path) -> tuple[float, float, dict, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = replace(Settings.from_env(), data_dir=Path(tmp), database_url="", embed_model="none",
                           undo_dir=Path(tmp) / "undo")
        mem = Memory.open(settings, check_model=False)
        try:
            start = time.perf_counter()
            cold = codegraph.build(mem, path=str(folder), project="bench", cwd=root)
            middle = time.perf_counter()
            warm = codegraph.build(mem, path=str(folder), project="bench", cwd=root)
            end = time.perf_counter()
        finally:
            mem.close()
    return middle - start, end - middle, cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default=str(Path(__file__).resolve().parent.parent / "src"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    folder = Path(args.path).resolve()
    root = repo_root(folder)
    assert root is not None, f"{folder} is not in a git repository"
    parse_times, cold_times, warm_times = [], [], []
    files = symbols = 0
    cold: dict = {}
    warm: dict = {}
    for _ in range(args.runs):
        start = time.perf_counter()
        files, symbols = parse_only(folder, root)
        parse_times.append(time.perf_counter() - start)
        cold_s, warm_s, cold, warm = one_store_run(folder, root)
        cold_times.append(cold_s)
        warm_times.append(warm_s)
    parse_s, cold_s, warm_s = (statistics.median(t) for t in (parse_times, cold_times, warm_times))
    print(json.dumps({
        "machine": f"{platform.processor() or platform.machine()}, {platform.python_implementation()}"
                   f" {platform.python_version()}", "path": str(folder), "runs": args.runs,
        "files": files, "symbols": symbols, "cold_files_parsed": cold["files_parsed"],
        "warm_files_unchanged": warm["files_unchanged"], "call_edges": cold["call_edges_written"],
        "parse_only_s": round(parse_s, 3), "cold_s": round(cold_s, 3), "warm_s": round(warm_s, 3),
        "parse_only_files_per_s": round(files / parse_s, 1), "parse_only_symbols_per_s": round(symbols / parse_s),
        "cold_files_per_s": round(files / cold_s, 1), "cold_symbols_per_s": round(symbols / cold_s),
        "warm_files_per_s": round(files / warm_s, 1),
        "cold_over_parse_only": round(cold_s / parse_s, 2), "warm_over_parse_only": round(warm_s / parse_s, 2),
    }, indent=2))


if __name__ == "__main__":
    main()
