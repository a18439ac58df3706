"""cuba_centinela (reminders) and cuba_ingesta (bulk writes).

Thin, like the other tools: the signature is the input schema, services/reminders.py and
services/ingest.py do the work. auto_extract reaches the client's own model through MCP
sampling (``sampling_ask``), as the grounding tools' judge does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
import anyio.from_thread
from mcp import types
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import Field

from cuba_memorys.server.runtime import Runtime
from cuba_memorys.server.sampling import sampling_judge, sampling_session
from cuba_memorys.services import reminders
from cuba_memorys.services.observations import ingest

Opt = Annotated


def sampling_ask(ctx: Context | None) -> ingest.Ask | None:
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

        result = anyio.from_thread.run(request)
        text = getattr(result.content, "text", "") if not isinstance(result.content, list) else ""
        return text, getattr(result, "model", None)

    return ask


def build(rt: Runtime) -> list[tuple[str, Any, str, ToolAnnotations]]:
    def cuba_centinela(
        action: Annotated[Literal["create", "list", "delete", "check"], Field(description="What to do")],
        entity_pattern: Opt[str | None, Field(description="create: glob (case-insensitive, * and ?) the reminder"
                                                          " watches: an entity name for on_access (whole name),"
                                                          " text found in a session's project/name/goals or in an"
                                                          " error for the others; check: the name or text to check")] = None,
        condition_type: Opt[str | None, Field(description="on_access (an entity is read or written), on_session_start,"
                                                          " on_error_match; required for create, check defaults to"
                                                          " on_access")] = None,
        message: Opt[str | None, Field(description="create: what to remind")] = None,
        max_fires: Opt[int | None, Field(description="create: times it fires before switching off (default 1;"
                                                     " -1 unlimited; at most 10000)")] = None,
        expires_at: Opt[str | None, Field(description="create: RFC 3339 date-time after which it never fires"
                                                      " (an invalid or past one is an error)")] = None,
        trigger_id: Opt[str | None, Field(description="delete: the trigger_id create returned")] = None,
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return rt.call(ctx, lambda mem, client: reminders.dispatch(
            mem, client, action, entity_pattern=entity_pattern, condition_type=condition_type, message=message,
            max_fires=max_fires, expires_at=expires_at, trigger_id=trigger_id, allow_secret=allow_secret))

    def cuba_ingesta(
        action: Annotated[Literal["ingest", "parse", "auto_extract"], Field(description="What to do")],
        items: Opt[list[Any] | None, Field(description="ingest: 1-200 items {entity_name, content, observation_type?,"
                                                        " source?, trust?, created_at?}; invalid ones are reported"
                                                        " by index, the others stored")] = None,
        entity_name: Opt[str | None, Field(description="parse: the entity the paragraphs are about")] = None,
        text: Opt[str | None, Field(description="parse: text whose blank-line separated paragraphs become typed"
                                                " observations; auto_extract: text the client's model reads")] = None,
        entity_hint: Opt[str | None, Field(description="auto_extract: entity for facts the model does not place")] = None,
        supersede_conflicts: Opt[bool, Field(description="auto_extract: mark superseded the stored facts of the same"
                                                         " entity that a new fact contradicts or replaces (judged"
                                                         " by the verify judges; cosine 0.30-0.85)")] = False,
        untrusted: Opt[bool, Field(description="Store every row quarantined: kept, never returned by search"
                                               " until promoted; auto_extract then writes no relations")] = False,
        allow_secret: Opt[bool, Field(description="Store text that looks like a credential anyway")] = False,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        ask = sampling_ask(ctx) if action == "auto_extract" else None
        return rt.call(ctx, lambda mem, client: ingest.dispatch(
            mem, client, action, ask, items=items, entity_name=entity_name, text=text, entity_hint=entity_hint,
            supersede_conflicts=supersede_conflicts, untrusted=untrusted, allow_secret=allow_secret,
            judges=mem.judge_chain(sampling_judge(ctx)) if supersede_conflicts is True else None))

    return [
        ("cuba_centinela", cuba_centinela, "Reminders: create one (entity_pattern glob, condition_type on_access |"
         " on_session_start | on_error_match, message, max_fires default 1 or -1 unlimited, expires_at), list,"
         " delete, check (fires the matching ones). Fired reminders also appear as triggered_reminders in the"
         " answer of the call that met them (cuba_alma get, cuba_cronica add/batch_add/list, cuba_ingesta,"
         " cuba_jornada start, cuba_alarma).",
         ToolAnnotations(readOnlyHint=False, destructiveHint=True)),
        ("cuba_ingesta", cuba_ingesta, "Bulk writes: ingest up to 200 observations (invalid items are reported by"
         " index, valid ones stored), parse a text into typed observations (one per paragraph: decision, lesson,"
         " error, solution, preference or fact by cue words), or auto_extract facts with your own model (MCP"
         " sampling; without it the answer says degraded). untrusted stores everything quarantined.",
         ToolAnnotations(readOnlyHint=False, destructiveHint=False)),
    ]
