"""Never deadlock (issue 28): the short runs of bench/daemon_load.py and bench/stdio_pipeline.py,
on each backend, against the real executable.

- eight HTTP clients on plain httpx, each a principal with its own project, mixing writes (batch
  writes that feed the embedding queue, audited writes, forget) and reads at once: no call may
  fail, hang or lose its write, nothing may leak across projects, /health stays answered, and
  the server logs no error (with CUBA_LOCK_CHECK on, a lock taken out of order is one);
- one stdio server getting windows of pipelined requests, each followed by a ping: every request
  is answered.

Before the fix the HTTP run wedged after ~500 calls (tests/test_lock_order.py reproduces both
causes within seconds). The long runs and their figures are in docs/reliability.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(script: str, args: list[str], location, tmp_path: Path) -> dict:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(BENCH / script), *args, "--out", str(out)], env=location.env(),
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.exists(), proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert proc.returncode == 0, (json.dumps(report, indent=1)[:6000], proc.stderr[-3000:])
    return report


def test_eight_agents_on_one_daemon_never_wedge(location, tmp_path):
    report = run_bench("daemon_load.py", ["--clients", "8", "--ops", "30", "--seed", "5", "--call-timeout", "60"],
                       location, tmp_path)
    (run,) = report["runs"]
    assert (run["errors"], run["hangs"], run["lost"], run["leaks"], run["server_errors"]) == (0, 0, 0, 0, 0)
    assert run["calls"] >= 8 * 30  # every client did all its work (a pizarra op is two calls)
    assert run["per_op"]["health"]["n"] > 0  # /health was polled, and answered, all along
    assert run["per_op"]["forget"]["n"] > 0 and run["per_op"]["batch_add"]["n"] > 0


def test_a_stdio_server_answers_every_pipelined_request(location, tmp_path):
    report = run_bench("stdio_pipeline.py", ["--requests", "150", "--seed", "3", "--reply-timeout", "60"],
                       location, tmp_path)
    (run,) = report["runs"]
    assert run["unanswered"] == 0 and run["internal_errors"] == 0 and run["server_errors"] == 0, run["samples"]
    assert run["answered"] == run["requests"] >= 150
