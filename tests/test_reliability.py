"""The reliability suite's short run (bench/reliability.py --short), on each backend: SIGKILL
during writes over stdio and HTTP, two processes on one store, concurrent clients in their own
projects, and schema-driven fuzzing of every tool — nothing acknowledged is lost, no store is
corrupt, nothing leaks across projects, every request is answered. The long run's figures are in
docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "reliability.py"


def test_the_short_reliability_run_finds_nothing(location, tmp_path):
    out = tmp_path / "reliability.json"
    # cwd: the fuzzed calls' relative paths (cuba_sync export's dir, ...) land in the test's own
    # folder, never in the repository (where they were left) or in another worker's way.
    proc = subprocess.run([sys.executable, str(BENCH), "--short", "--seed", "3", "--out", str(out)],
                          env=location.env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    report = json.loads(out.read_text())
    assert proc.returncode == 0 and report["failures"] == {}, (report["failures"], report["fuzz"]["examples"])
    assert report["stdio_kills"]["acknowledged"] > 0 and report["http_kills"]["trials"] >= 1
    assert report["fuzz"]["calls"] == 300 and report["clients"]["acknowledged"] > 0
