"""A stdio server that never goes deaf: pipelined requests with a ping after every window (issue 28).

One `cuba-memorys` over stdio gets windows of 1-6 requests written at once, without waiting for
replies (batch writes that leave rows in the embedding queue, single adds, searches, lists,
working memory, forget, audit verify), then a ``ping``. Every request of the window and the ping
must be answered within ``--reply-timeout``; a window that is not is a hang, and the run stops
there with the server's log (its watchdog stacks) kept.

    .venv/bin/python bench/stdio_pipeline.py --requests 10000 --runs 5      # the long run
    .venv/bin/python bench/stdio_pipeline.py --requests 600                 # what the suite runs

Exit status 1 when a request went unanswered, an answer was an internal error, or the server
logged an error. tests/test_daemon_load.py runs a short version of the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from raw_client import RawServer

WORDS = ("cache", "queue", "retry", "schema", "index", "token", "deploy", "webhook", "billing", "ledger",
         "migration", "session", "timeout", "shard", "replica", "gateway", "parser", "lease")


class Mix:
    """A seeded stream of tool calls an agent makes."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.doomed = 0

    def text(self, words: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(words)) + f" n{self.rng.randrange(10**9)}."

    def call(self) -> tuple[str, dict[str, Any]]:
        entity = f"e{self.rng.randrange(20)}"
        pick = self.rng.random()
        if pick < 0.12:
            items = [{"entity_name": f"e{self.rng.randrange(20)}", "content": self.text(self.rng.randint(60, 160))}
                     for _ in range(self.rng.randint(5, 30))]
            return "cuba_cronica", {"action": "batch_add", "observations": items}
        if pick < 0.30:
            return "cuba_cronica", {"action": "add", "entity_name": entity, "content": self.text(12)}
        if pick < 0.50:
            return "cuba_faro", {"query": self.text(2), "limit": 5}
        if pick < 0.60:
            return "cuba_cronica", {"action": "list", "entity_name": entity}
        if pick < 0.70:
            return "cuba_pizarra", {"action": "write", "content": self.text(8), "tag": "load"}
        if pick < 0.78:
            return "cuba_pizarra", {"action": "read", "tag": "load"}
        if pick < 0.85:
            return "cuba_decreto", {"action": "record", "title": self.text(3), "chosen": "a", "rationale": self.text(9)}
        if pick < 0.90:
            return "cuba_contexto", {"budget_chars": 3000}
        if pick < 0.93:
            return "cuba_archivo", {"action": "verify"}
        if pick < 0.97:
            return "search_hipocampo", {"query": self.text(2), "k": 5}
        self.doomed += 1
        return "cuba_alma", {"action": "create", "name": f"doomed{self.doomed}"}


def run(requests: int, seed: int, reply_timeout: float, env: dict[str, str], folder: Path) -> dict[str, Any]:
    env = {**env, "CUBA_DATA_DIR": str(folder / "data"), "CUBA_UNDO_DIR": str(folder / "undo")}
    log = folder / "stdio.log"
    server = RawServer(env, log=log)
    mix = Mix(seed)
    rng = random.Random(seed)
    sent = answered = internal = windows = 0
    unanswered: list[str] = []
    began = time.perf_counter()
    try:
        server.initialize()
        while sent < requests and not unanswered:
            window = []
            for _ in range(rng.randint(1, 6)):
                tool, args = mix.call()
                request_id = server.next_id()
                line = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                        "params": {"name": tool, "arguments": args}}
                window.append((request_id, tool))
                server.send_line(json.dumps(line))
            forget = [f"doomed{n}" for n in range(1, mix.doomed + 1)][-1:]
            for name in forget if rng.random() < 0.3 else []:
                request_id = server.next_id()
                server.send_line(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                                             "params": {"name": "cuba_forget",
                                                        "arguments": {"entity_name": name, "confirm": True}}}))
                window.append((request_id, "cuba_forget"))
            ping = server.next_id()
            server.send_line(json.dumps({"jsonrpc": "2.0", "id": ping, "method": "ping"}))
            window.append((ping, "ping"))
            for request_id, tool in window:
                reply = server.wait_reply(request_id, reply_timeout)
                if reply is None:
                    unanswered.append(f"{tool} (id {request_id}) after {sent} requests")
                    break
                answered += 1
                text = json.dumps(reply.get("result", reply.get("error", "")))[:400]
                if "internal error" in text:
                    internal += 1
            sent += len(window)
            windows += 1
    finally:
        server.close()
    text = log.read_text(errors="replace") if log.exists() else ""
    errors = [line for line in text.splitlines() if " ERROR " in line or "LockOrderError" in line]
    return {"requests": sent, "windows": windows, "answered": answered, "unanswered": len(unanswered),
            "internal_errors": internal, "server_errors": len(errors),
            "elapsed_s": round(time.perf_counter() - began, 1),
            "samples": {"unanswered": unanswered[:5], "server_errors": errors[:5]},
            **({"server_log_tail": text[-20000:]} if unanswered or errors else {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--reply-timeout", type=float, default=60.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    for n in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="cuba-stdio-") as scratch:
            result = run(args.requests, args.seed + n, args.reply_timeout, dict(os.environ), Path(scratch))
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k not in ("samples", "server_log_tail")}), flush=True)
        if result["unanswered"] or result["server_errors"]:
            print(json.dumps(result["samples"], indent=1), result.get("server_log_tail", "")[-5000:], file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "runs": results}, indent=2))
    bad = any(r["unanswered"] or r["internal_errors"] or r["server_errors"] for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
