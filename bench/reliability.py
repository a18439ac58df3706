"""The reliability suite: kill the server while it writes, run two processes on one store, serve
many clients at once, fuzz every tool — and count what was lost, leaked, left unanswered or
broken. Seeds and counts are arguments, so every run can be repeated.

    .venv/bin/python bench/reliability.py --seed 7 --kill-trials 100 --fuzz-calls 10000 \\
        --clients 8 --ops 500 --out reliability.json                   # the long run (docs/reliability.md)
    .venv/bin/python bench/reliability.py --short                      # what `make test` runs (~1 min)
    DATABASE_URL=postgresql://… .venv/bin/python bench/reliability.py --short   # on PostgreSQL

Phases, each against the real `cuba-memorys` executable:
- stdio kills: a writer sends cuba_cronica add calls; SIGKILL at a random moment; every write
  the server acknowledged must be in the store after the restart, and the store must pass its
  integrity checks.
- HTTP kills: the same through `serve` and the official client.
- reembed kills: `reembed --all` killed half-way, then run again; every row ends embedded.
- two processes: two stdio servers write to one store at once; nothing lost, nothing "locked".
- clients: N official HTTP clients, each in its own project, write and search at once; a search
  result from another client's project is a leak; every acknowledged write must be there.
- fuzz: schema-driven calls to every tool (bench/fuzz.py) on one stdio server.
Exit status 1 when any count that must be 0 is not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz import BROKEN_LINES, Tally, broken, broken_line, names_something, plausible
from raw_client import SERVER, RawServer, tool_payload

MUST_BE_ZERO = ("lost", "corrupt", "locked", "failed_writes", "leaks", "unanswered", "crashes", "internal_text",
                "unnamed_refusals",
                "success_on_invalid", "not_embedded")


class Store:
    """Where the suite's servers keep their memory: a fresh folder, or DATABASE_URL's database."""

    def __init__(self, root: Path, database_url: str) -> None:
        self.root, self.database_url = root, database_url

    def env(self, name: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
        env.update(CUBA_DATA_DIR=str(self.root / name), CUBA_EMBED_MODEL="none", CUBA_RERANKER="none",
                   CUBA_HANDSHAKE_TIMEOUT_SECS="0")
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        env.update(extra)
        return env

    def check(self, name: str, ids: list[str]) -> dict[str, int]:
        """{"lost": acknowledged ids not stored, "corrupt": 1 when an integrity check fails}."""
        env = self.env(name)
        script = ("import json, sys\n"
                  "from cuba_memorys.config import Settings\nfrom cuba_memorys.services.memory import Memory\n"
                  "from cuba_memorys.models import Scope\n"
                  "mem = Memory.open(Settings.from_env(), check_model=False)\n"
                  "ids = json.load(sys.stdin)\n"
                  "lost = sum(mem.store.get_observation(i, Scope()) is None for i in ids)\n"
                  "orphans = mem.store._one('SELECT count(*) FROM observations o LEFT JOIN entities e"
                  " ON e.id = o.entity_id WHERE e.id IS NULL')[0]\n"
                  "mem.close()\nprint(json.dumps({'lost': lost, 'orphans': orphans}))\n")
        proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(ids), capture_output=True,
                              text=True, env=env, timeout=600)
        if proc.returncode != 0:
            return {"lost": len(ids), "corrupt": 1, "error": proc.stderr[-500:]}  # type: ignore[dict-item]
        found = json.loads(proc.stdout)
        corrupt = int(found["orphans"] > 0) or self.integrity(name)
        return {"lost": found["lost"], "corrupt": corrupt}

    def integrity(self, name: str) -> int:
        if self.database_url:
            return 0  # PostgreSQL checks its own pages; the orphan count above is ours
        db = self.root / name / "memory.db"
        with sqlite3.connect(db) as conn:
            ok = conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        return int(not ok or bool(fk))


def add_args(tag: str, n: int) -> dict[str, str]:
    return {"action": "add", "entity_name": f"{tag}-{n % 5}", "content": f"{tag} row {n}: the job wrote batch {n}"}


# -- kills ---------------------------------------------------------------------------------------
def stdio_kills(store: Store, trials: int, rng: random.Random) -> dict[str, Any]:
    acked: list[str] = []
    for trial in range(trials):
        server = RawServer(store.env("kills"))
        server.initialize()
        threading.Timer(rng.uniform(0.2, 1.5), server.kill).start()
        n = 0
        while server.alive():
            kind, answer = tool_payload(server.call("cuba_cronica", add_args(f"t{trial}", n), timeout=30))
            if kind == "ok":
                acked.append(answer["id"])
            n += 1
        server.close()
    return {"trials": trials, "acknowledged": len(acked), **store.check("kills", acked)}


def http_kills(store: Store, trials: int, rng: random.Random) -> dict[str, Any]:
    import anyio

    acked: list[str] = []
    for trial in range(trials):
        port = _free_port()
        proc = subprocess.Popen([str(SERVER), "serve", f"127.0.0.1:{port}"], env=store.env("http-kills"),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_health(port)
        acked += anyio.run(_write_until_gone, port, f"h{trial}", proc, rng.uniform(0.2, 1.5))
        proc.wait(timeout=30)
    return {"trials": trials, "acknowledged": len(acked), **store.check("http-kills", acked)}


async def _write_until_gone(port: int, tag: str, proc: subprocess.Popen, kill_after: float) -> list[str]:
    acked: list[str] = []
    try:
        async with _session(port, {}) as session:
            threading.Timer(kill_after, proc.kill).start()  # from the first write on
            for n in range(100_000):
                result = await session.call_tool("cuba_cronica", add_args(tag, n))
                if not result.is_error:
                    acked.append(result.structured_content["id"])
    except BaseException:
        pass
    return acked


def reembed_kills(store: Store, trials: int, rng: random.Random) -> dict[str, Any]:
    server = RawServer(store.env("reembed"))
    server.initialize()
    rows = [{"entity_name": f"svc{n % 9}", "content": f"Service {n} logs to stream {n % 4} and listens on {8000 + n}"}
            for n in range(300)]
    for start in range(0, len(rows), 100):
        server.call("cuba_cronica", {"action": "batch_add", "observations": rows[start:start + 100]})
    server.close()
    model_env = store.env("reembed", CUBA_EMBED_MODEL="multilingual-e5-small")
    for _ in range(trials):
        proc = subprocess.Popen([str(SERVER), "reembed", "--all"], env=model_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(2.0, 5.0))
        proc.kill()
        proc.wait(timeout=30)
    done = subprocess.run([str(SERVER), "reembed", "--json"], env=model_env, capture_output=True, text=True,
                          timeout=900)
    doctor = json.loads(subprocess.run([str(SERVER), "doctor", "--json"], env=model_env, capture_output=True,
                                       text=True, timeout=300).stdout)
    missing = doctor["embedding_coverage"]["missing"]
    return {"trials": trials, "rows": len(rows), "not_embedded": missing + int(done.returncode != 0),
            "corrupt": store.integrity("reembed")}


def two_processes(store: Store, rows: int) -> dict[str, Any]:
    acked: list[str] = []
    locked = 0
    lock = threading.Lock()

    failed: list[str] = []

    def writer(tag: str) -> None:
        nonlocal locked
        server = RawServer(store.env("shared"), log=store.root / f"shared-{tag}.log")
        try:
            server.initialize()
            for n in range(rows):
                kind, answer = tool_payload(server.call("cuba_cronica", add_args(tag, n)))
                with lock:
                    if kind == "ok":
                        acked.append(answer["id"])
                    elif "locked" in str(answer).lower():
                        locked += 1
                    else:
                        failed.append(f"{tag} {n}: {kind} {str(answer)[:200]}")
        except Exception as exc:  # a writer that could not run is a failure to report
            failed.append(f"{tag}: {type(exc).__name__}: {exc}")
        finally:
            server.close()

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"rows": 2 * rows, "acknowledged": len(acked), "locked": locked, "failed_writes": len(failed),
            "failures_seen": failed[:5], **store.check("shared", acked)}


# -- many clients ----------------------------------------------------------------------------------
def clients(store: Store, count: int, ops: int, rng: random.Random) -> dict[str, Any]:
    import anyio

    port = _free_port()
    proc = subprocess.Popen([str(SERVER), "serve", f"127.0.0.1:{port}"], env=store.env("clients"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_health(port)
        results = anyio.run(_all_clients, port, count, ops, rng.randrange(1 << 30))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    acked = [i for r in results for i in r["acked"]]
    return {"clients": count, "operations": count * ops, "acknowledged": len(acked),
            "leaks": sum(r["leaks"] for r in results), "unanswered": sum(r["failed"] for r in results),
            **store.check("clients", acked)}


async def _all_clients(port: int, count: int, ops: int, seed: int) -> list[dict]:
    import anyio

    results: list[dict] = [{} for _ in range(count)]

    async def one(index: int) -> None:
        results[index] = await _client(port, index, ops, random.Random(seed + index))

    async with anyio.create_task_group() as tasks:
        for index in range(count):
            tasks.start_soon(one, index)
    return results


async def _client(port: int, index: int, ops: int, rng: random.Random) -> dict:
    acked, leaks, failed = [], 0, 0
    async with _session(port, {"Mcp-Client-Id": f"client-{index}"}) as session:
        await session.call_tool("cuba_proyecto", {"action": "switch", "name": f"project-{index}"})
        for n in range(ops):
            if rng.random() < 0.6:
                result = await session.call_tool("cuba_cronica", {
                    "action": "add", "entity_name": f"component-{n % 7}",
                    "content": f"client {index} note {n}: the shared marker word zebracorn"})
                if result.is_error:
                    failed += 1
                else:
                    acked.append(result.structured_content["id"])
            else:
                result = await session.call_tool("cuba_faro", {"query": "zebracorn marker note", "limit": 20})
                if result.is_error:
                    failed += 1
                    continue
                leaks += sum(1 for row in result.structured_content["results"]
                             if "zebracorn" in row.get("c", "") and not row["c"].startswith(f"client {index} "))
    return {"acked": acked, "leaks": leaks, "failed": failed}


# -- fuzz ----------------------------------------------------------------------------------------
def fuzz(store: Store, calls: int, rng: random.Random) -> dict[str, Any]:
    server = RawServer(store.env("fuzz"))
    server.initialize()
    tools = schemas(server.request("tools/list", {})["result"]["tools"])
    tally = Tally()
    for _ in range(calls):
        if not server.alive():
            tally.note("crashes", "the server exited")
            server.close()
            server = RawServer(store.env("fuzz"))
            server.initialize()
        _one_case(server, tools, tally, rng)
    server.close()
    return {"calls": tally.calls, "unanswered": tally.unanswered, "crashes": tally.crashes,
            "internal_text": tally.internal_text, "success_on_invalid": tally.success_on_invalid,
            "unnamed_refusals": tally.unnamed_refusals, "by_kind": tally.by_kind, "examples": tally.examples,
            **store.check("fuzz", [])}


ALIAS = re.compile(r"^\[alias of (\w+)\]")


def schemas(listed: list[dict]) -> dict[str, dict]:
    """Each listed tool's input schema; an alias (listed as "[alias of cuba_x]" with an open schema,
    to keep tools/list small) is called with its tool's."""
    out = {t["name"]: t["inputSchema"] for t in listed}
    for t in listed:
        alias = ALIAS.match(t.get("description") or "")
        if alias and alias.group(1) in out:
            out[t["name"]] = out[alias.group(1)]
    return out


def ignored_only(answer: Any, name: str | None) -> bool:
    """A success on broken input that is right: the broken value went to ``name``, a parameter of
    another of the tool's actions, which the original accepts and ignores, and the answer says so."""
    return name is not None and isinstance(answer, dict) and name in (answer.get("ignored") or [])


def _one_case(server: RawServer, tools: dict[str, dict], tally: Tally, rng: random.Random) -> None:
    tally.calls += 1
    roll = rng.random()
    if roll < 0.08:  # a line that is not a valid message
        kind = rng.choice(BROKEN_LINES)
        request_id = server.next_id()
        server.send_line(broken_line(kind, request_id))
        wanted: Any = None if kind == "truncated" else request_id
        reply = server.wait_reply(wanted, 30)
        tally.by_kind[kind] = tally.by_kind.get(kind, 0) + 1
        if reply is None:
            tally.note("unanswered", f"{kind} line")
        return
    name = rng.choice(list(tools))
    schema = tools[name]
    how, args, spoilt = ("plausible", plausible(schema, rng), None) if roll < 0.55 else broken(schema, rng)
    tally.by_kind[how] = tally.by_kind.get(how, 0) + 1
    kind, answer = tool_payload(server.call(name, args, timeout=60))
    text = json.dumps(answer, ensure_ascii=False) if kind == "ok" else str(answer)
    if kind == "none":
        tally.note("unanswered", f"{name} {json.dumps(args)[:200]}")
    elif "Traceback" in text or "internal error" in text:
        tally.note("internal_text", f"{name} {text}")
    elif kind == "ok" and how != "plausible" and not ignored_only(answer, spoilt):
        tally.note("success_on_invalid", f"{name} {how} {json.dumps(args)[:200]}")
    elif kind != "ok" and not names_something(text, schema):
        tally.note("unnamed_refusals", f"{name} {text}")


# -- plumbing ------------------------------------------------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_health(port: int) -> None:
    import httpx

    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("serve did not come up")


def _session(port: int, headers: dict[str, str]):
    from contextlib import asynccontextmanager

    import httpx
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    @asynccontextmanager
    async def opened():
        async with (httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=120)) as http,
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write, *_),
                    ClientSession(read, write) as session):
            await session.initialize()
            yield session

    return opened()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kill-trials", type=int, default=10)
    parser.add_argument("--http-kill-trials", type=int, default=None, help="default: a fifth of --kill-trials")
    parser.add_argument("--reembed-trials", type=int, default=2)
    parser.add_argument("--two-process-rows", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--ops", type=int, default=50)
    parser.add_argument("--fuzz-calls", type=int, default=1000)
    parser.add_argument("--short", action="store_true", help="the quick run `make test` does")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.short:
        args.kill_trials, args.http_kill_trials, args.reembed_trials = 4, 1, 0
        args.two_process_rows, args.clients, args.ops, args.fuzz_calls = 30, 3, 20, 300
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cuba-reliability-") as root:
        store = Store(Path(root), os.environ.get("DATABASE_URL", ""))
        report: dict[str, Any] = {
            "stdio_kills": stdio_kills(store, args.kill_trials, rng),
            "http_kills": http_kills(store, args.http_kill_trials or max(1, args.kill_trials // 5), rng),
            "two_processes": two_processes(store, args.two_process_rows),
            "clients": clients(store, args.clients, args.ops, rng),
            "fuzz": fuzz(store, args.fuzz_calls, rng),
        }
        if args.reembed_trials:
            report["reembed_kills"] = reembed_kills(store, args.reembed_trials, rng)
    failures = {f"{phase}.{key}": value for phase, counts in report.items() for key, value in counts.items()
                if key in MUST_BE_ZERO and value}
    summary = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "seed": args.seed,
               "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python"
                          f" {platform.python_version()}", "backend": "postgresql" if store.database_url else "sqlite",
               "seconds": round(time.monotonic() - started, 1), "failures": failures, **report}
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
