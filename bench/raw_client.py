"""A raw JSON-RPC client for `cuba-memorys` over stdio, for the reliability suite.

Raw, not the official client: the fuzzer sends lines a client library never would (broken JSON,
lone surrogates, deep nesting), and the kill loop must see exactly which requests were answered
before the process died. One reader thread files each reply under its id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

SERVER = Path(sys.executable).with_name("cuba-memorys")


class RawServer:
    def __init__(self, env: dict[str, str], args: tuple[str, ...] = (), log: Path | None = None) -> None:
        self.log = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([str(SERVER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env)
        self.replies: dict[Any, dict] = {}
        self.unmatched: list[dict] = []
        self._seen = threading.Condition()
        self._next = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                message = {"unparsable": line[:200].decode(errors="replace")}
            with self._seen:
                if isinstance(message, dict) and "id" in message:
                    self.replies[message["id"]] = message
                else:
                    self.unmatched.append(message)
                self._seen.notify_all()
        with self._seen:
            self._seen.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def next_id(self) -> int:
        self._next += 1
        return self._next

    def send_line(self, line: str) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode("utf-8", "surrogatepass") + b"\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def wait_reply(self, request_id: Any, timeout: float) -> dict | None:
        end = time.monotonic() + timeout
        with self._seen:
            while request_id not in self.replies:
                left = end - time.monotonic()
                if left <= 0 or (not self.alive() and request_id not in self.replies):
                    return self.replies.get(request_id)
                self._seen.wait(min(left, 0.5))
            return self.replies.pop(request_id)

    def request(self, method: str, params: dict | None = None, timeout: float = 60.0) -> dict | None:
        request_id = self.next_id()
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        if not self.send_line(json.dumps(body)):
            return None
        return self.wait_reply(request_id, timeout)

    def initialize(self) -> dict:
        reply = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "reliability", "version": "1"}}, timeout=120)
        if not reply or "result" not in reply:
            raise RuntimeError(f"initialize failed: {reply}")
        self.send_line(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        return reply["result"]

    def call(self, tool: str, arguments: dict, timeout: float = 60.0) -> dict | None:
        """The tools/call reply ({"result": …} or {"error": …}), or None when none came."""
        return self.request("tools/call", {"name": tool, "arguments": arguments}, timeout)

    def kill(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.alive() and self.proc.stdin:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (subprocess.TimeoutExpired, OSError):
                self.kill()
        if self.log is not subprocess.DEVNULL:
            self.log.close()


def tool_payload(reply: dict | None) -> tuple[str, Any]:
    """("ok", structured answer) | ("tool_error", text) | ("rpc_error", error) | ("none", None)."""
    if reply is None:
        return "none", None
    if "error" in reply:
        return "rpc_error", reply["error"]
    result = reply.get("result", {})
    text = (result.get("content") or [{}])[0].get("text", "")
    if result.get("isError"):
        return "tool_error", text
    return "ok", result.get("structuredContent", text)
