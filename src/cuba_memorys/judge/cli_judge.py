"""A local command-line LLM as a judge (CUBA_JUEZ_CLI): the chain's third judge, after the NLI
model and the MCP client's own model.

``CUBA_JUEZ_CLI`` is a command line (``auto``, the default, means the ``claude`` CLI when it is on
PATH; ``none`` turns the judge off). The prompt goes on stdin, never on the command line (where
other users could read it); the ``claude`` CLI also gets ``-p --model $CUBA_JUEZ_MODEL
--output-format text --system-prompt ...``, any other command gets the model in the environment
as CUBA_JUEZ_MODEL. The child runs in its own process group without the server's secrets
(DATABASE_URL, tokens, the audit key) and is killed, group and all, at CUBA_JUEZ_TIMEOUT_SECS;
a failure, a timeout or an answer that is not the JSON asked for is ``unknown`` with why.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cuba_memorys.config import Settings
from cuba_memorys.judge.base import CLAIM_VERDICTS, PAIR_VERDICTS, UNKNOWN, Verdict
from cuba_memorys.judge.llm import SYSTEM, claim_prompt, pair_prompt, parse_verdict

DEFAULT_CLI = "claude"
MAX_OUTPUT = 64 * 1024  # an answer is one small JSON object; more is not read
SECRET_ENV = ("DATABASE_URL", "CUBA_HTTP_TOKEN", "CUBA_PEER_TOKEN", "CUBA_AUDIT_KEY", "CUBA_TOKENS_FILE")


@dataclass(frozen=True)
class CliChoice:
    """Which command the CLI judge would run, or why there is none."""
    argv: tuple[str, ...] | None
    reason: str | None
    set_by_user: bool


def cli_choice(settings: Settings) -> CliChoice:
    setting = settings.juez_cli.strip()
    if setting.lower() in ("none", "off", "false", "0"):
        return CliChoice(None, "the CLI judge is off (CUBA_JUEZ_CLI=none)", False)
    by_user = setting.lower() not in ("", "auto")
    try:
        words = shlex.split(setting) if by_user else [DEFAULT_CLI]
    except ValueError as exc:
        return CliChoice(None, f"CUBA_JUEZ_CLI is not a command line: {exc}", True)
    if not words:
        return CliChoice(None, "CUBA_JUEZ_CLI is empty", True)
    found = shutil.which(words[0])
    if found is None:
        why = (f"CUBA_JUEZ_CLI names {words[0]!r}, which is not an executable on PATH" if by_user else
               f"no {DEFAULT_CLI!r} CLI on PATH (set CUBA_JUEZ_CLI to a command that reads a prompt on"
               " stdin and prints the answer)")
        return CliChoice(None, why, by_user)
    return CliChoice((found, *words[1:]), None, by_user)


class CliJudge:
    backend = "cli"
    parallel = True  # each judgment is its own process: a verify may run them side by side

    def __init__(self, argv: tuple[str, ...], model: str, timeout: float) -> None:
        self.argv, self.model, self.timeout = argv, model, timeout

    def judge_claim(self, claim: str, evidence: str, timeout: float | None = None) -> Verdict:
        return self._ask(claim_prompt(claim, evidence), CLAIM_VERDICTS, timeout)

    def judge_pair(self, first: str, second: str, timeout: float | None = None) -> Verdict:
        return self._ask(pair_prompt(first, second), PAIR_VERDICTS, timeout)

    @property
    def is_claude(self) -> bool:
        """A bare `claude` (or claude.cmd): the flags below are added; any other command runs as given."""
        return Path(self.argv[0]).stem == DEFAULT_CLI and len(self.argv) == 1

    def command(self) -> list[str]:
        if not self.is_claude:
            return list(self.argv)
        # print mode, no tools, none of the user's MCP servers (this one included), no saved session
        return [*self.argv, "-p", "--model", self.model, "--output-format", "text", "--system-prompt", SYSTEM,
                "--tools", "", "--strict-mcp-config", "--no-session-persistence"]

    def _ask(self, prompt: str, allowed: tuple[str, ...], timeout: float | None = None) -> Verdict:
        limit = min(self.timeout, timeout) if timeout is not None else self.timeout
        stdin = prompt if self.is_claude else f"{SYSTEM}\n\n{prompt}"
        with tempfile.TemporaryDirectory(prefix="cuba-judge-") as cwd:  # no project files to read
            code, out, err = run(self.command(), stdin, limit, child_env(self.model), cwd)
        if code is None:
            return Verdict(UNKNOWN, 0.0, f"the cli judge gave no answer within {limit:.1f} s", self.backend,
                           self.model)
        if code == TOO_LONG:
            return Verdict(UNKNOWN, 0.0, f"the cli judge's answer ran past {MAX_OUTPUT // 1024} KiB", self.backend,
                           self.model)
        if code != 0:
            return Verdict(UNKNOWN, 0.0, f"the cli judge exited with {code}: {err.strip()[:160]!r}", self.backend,
                           self.model)
        return parse_verdict(out, allowed, self.model, self.backend)


def child_env(model: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env["CUBA_JUEZ_MODEL"] = model
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"  # no background requests for a one-shot answer
    return env


TOO_LONG = -1  # the exit "code" run() reports for an answer over MAX_OUTPUT (the child was killed)


def run(argv: list[str], stdin: str, timeout: float, env: dict[str, str],
        cwd: str | None = None) -> tuple[int | None, str, str]:
    """(exit code, stdout, stderr) of ``argv`` fed ``stdin``. The exit code is None when it ran out
    of time and TOO_LONG when it wrote more than MAX_OUTPUT; either way its whole process group is
    killed. Reading is bounded (never more than MAX_OUTPUT per stream in memory) and never waits
    past the deadline, even for a grandchild that escaped the group and holds the pipes open."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd=cwd, start_new_session=True)
    except OSError as exc:
        return 127, "", f"could not start {argv[0]}: {exc}"
    try:
        status, out, err = _exchange(proc, stdin.encode("utf-8"), time.monotonic() + timeout)
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
    code = {"timeout": None, "too_long": TOO_LONG}.get(status, proc.returncode)
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _exchange(proc: subprocess.Popen, data: bytes, deadline: float) -> tuple[str, bytes, bytes]:
    """Write ``data`` to the child and read its two streams until both close and it exits
    ("done"), the deadline passes ("timeout") or a stream grows past MAX_OUTPUT ("too_long")."""
    assert proc.stdin and proc.stdout and proc.stderr
    out_fd, err_fd, in_fd = proc.stdout.fileno(), proc.stderr.fileno(), proc.stdin.fileno()
    chunks = {out_fd: bytearray(), err_fd: bytearray()}
    pending = memoryview(data)
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        if pending:
            os.set_blocking(in_fd, False)
            sel.register(in_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", bytes(chunks[out_fd]), bytes(chunks[err_fd])
            for key, _ in sel.select(timeout=left):
                if key.fd == in_fd:
                    pending = _feed(in_fd, pending)
                    if not pending:
                        sel.unregister(in_fd)
                        proc.stdin.close()
                    continue
                block = os.read(key.fd, 65536)
                if not block:
                    sel.unregister(key.fd)
                elif len(chunks[key.fd]) + len(block) > MAX_OUTPUT:
                    return "too_long", b"", b""
                else:
                    chunks[key.fd] += block
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return "timeout", bytes(chunks[out_fd]), bytes(chunks[err_fd])
    return "done", bytes(chunks[out_fd]), bytes(chunks[err_fd])


def _feed(fd: int, pending: memoryview) -> memoryview:
    """Write what the pipe takes now; a child that stopped reading gets no more (what it says counts)."""
    try:
        return pending[os.write(fd, pending[:65536]):]
    except (BrokenPipeError, OSError):
        return pending[:0]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def load_cli_judge(settings: Settings) -> CliJudge | None:
    choice = cli_choice(settings)
    if choice.argv is None:
        return None
    # A judgment must end before the MCP handler's own limit, or the caller gets a timeout, not a verdict.
    timeout = min(settings.juez_timeout_secs, max(1.0, settings.handler_timeout_secs * 0.8))
    return CliJudge(choice.argv, settings.juez_model, timeout)
