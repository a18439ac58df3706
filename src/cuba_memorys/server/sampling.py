"""The MCP client's own model, through sampling (`sampling/createMessage`): as a judge, and as
the fact extractor of cuba_ingesta auto_extract (``sampling_ask``).

Used when no NLI model is installed and the connected client declared the sampling capability.
The model is asked for one JSON object; anything else (a refusal, prose, a timeout) counts as
``unknown``, never as a verdict. Tools run in worker threads, so the request goes back to the
event loop with ``anyio.from_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib

import anyio.from_thread
from mcp import types
from mcp.server.mcpserver import Context

from cuba_memorys import locks
from cuba_memorys.judge.base import CLAIM_VERDICTS, PAIR_VERDICTS, Verdict
from cuba_memorys.judge.llm import SYSTEM, claim_prompt, pair_prompt, parse_verdict
from cuba_memorys.services.observations.ingest import Ask

MAX_TOKENS = 200
TIMEOUT_SECONDS = 30.0


def sampling_session(ctx: Context | None):
    """The MCP session when its client declared the sampling capability, else None."""
    try:
        session = ctx.session if ctx is not None else None
        wanted = types.ClientCapabilities(sampling=types.SamplingCapability())
        if session is None or not session.check_client_capability(wanted):
            return None
    except (AttributeError, LookupError, RuntimeError):
        return None
    return session


def sampling_ask(ctx: Context | None) -> Ask | None:
    """A function asking the client's model one prompt, or None when the client cannot sample.
    Tools run in worker threads, so the request goes back to the event loop."""
    session = sampling_session(ctx)
    if session is None:
        return None

    def ask(system: str, prompt: str, max_tokens: int, timeout: float) -> tuple[str, str | None]:
        message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))

        async def request():
            with anyio.fail_after(timeout):
                return await session.create_message([message], max_tokens=max_tokens, system_prompt=system,
                                                    temperature=0.0)

        locks.before_waiting("the MCP client's model (sampling)")
        result = anyio.from_thread.run(request)
        text = getattr(result.content, "text", "") if not isinstance(result.content, list) else ""
        return text, getattr(result, "model", None)

    return ask


def sampling_judge(ctx: Context | None) -> SamplingJudge | None:
    """A judge backed by the client's model, or None when the client cannot sample."""
    session = sampling_session(ctx)
    return SamplingJudge(session) if session is not None else None


class SamplingJudge:
    backend = "sampling"

    def __init__(self, session) -> None:
        self._session = session
        self.model: str | None = None

    def judge_claim(self, claim: str, evidence: str) -> Verdict:
        return self._ask(claim_prompt(claim, evidence), CLAIM_VERDICTS)

    def judge_pair(self, first: str, second: str) -> Verdict:
        return self._ask(pair_prompt(first, second), PAIR_VERDICTS)

    def _ask(self, prompt: str, allowed: tuple[str, ...]) -> Verdict:
        message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))

        async def request():
            with anyio.fail_after(TIMEOUT_SECONDS):
                return await self._session.create_message([message], max_tokens=MAX_TOKENS,
                                                          system_prompt=SYSTEM, temperature=0.0)

        locks.before_waiting("the MCP client's model (sampling)")
        result = anyio.from_thread.run(request)
        self.model = getattr(result, "model", None) or self.model
        text = getattr(result.content, "text", "") if not isinstance(result.content, list) else ""
        return parse_verdict(text, allowed, self.model, self.backend)


def progress_reporter(ctx: Context | None):
    """``report(done, total, message)`` sending MCP progress notifications when the client
    asked for them (a progress token in the request's _meta), else None. Made on the event loop;
    called from the worker thread, where each report is handed to the loop without waiting for it
    (so a report made inside a write transaction never waits on anything)."""
    try:
        meta = ctx.request_context.meta if ctx is not None else None  # a mapping (RequestParamsMeta)
        token = (meta.get("progress_token", meta.get("progressToken")) if isinstance(meta, dict)
                 else getattr(meta, "progress_token", None))
    except (AttributeError, LookupError, RuntimeError, ValueError):
        return None
    if token is None or ctx is None:
        return None
    context = ctx
    loop = asyncio.get_running_loop()
    sent: list[asyncio.Task] = []  # kept until done: the loop holds tasks only weakly

    async def quietly(done: float, total: float | None, message: str | None) -> None:
        with contextlib.suppress(Exception):  # a client gone must not fail the work itself
            await context.report_progress(done, total, message)

    def send(done: float, total: float | None, message: str | None) -> None:
        task = loop.create_task(quietly(done, total, message))
        sent.append(task)
        task.add_done_callback(sent.remove)

    def report(done: float, total: float | None, message: str | None = None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: the client is gone
            loop.call_soon_threadsafe(send, done, total, message)

    return report
