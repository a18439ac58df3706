"""The tool catalogue: the one map from every MCP tool to its family, its actions, the service
function each action calls and the type of its answer.

The server registers every tool from ``TOOLS`` in one loop (server/app.py); profiles, the
annotations clients read, ``cuba_tools`` and ``cuba_call`` all answer from it. Routing by
action happens in one place (``server/runtime.py``): the action's row says which parameters it
reads and which it requires; an argument that belongs to another action is ignored, as the
original ignores it, and the answer names it (``ignored``).

Adding a tool: one row here, one service function, one signature in ``server/tools/<family>.py``,
its tests, and its line in the README (tests/test_docs.py checks that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from cuba_memorys.config import TOOL_PROFILES
from cuba_memorys.server.tools import agents as agent_tools
from cuba_memorys.server.tools import artifacts as artifact_tools
from cuba_memorys.server.tools import (
    audit,
    calibration,
    graph,
    grounding,
    incidents,
    lifecycle,
    observations,
    reminders,
    search,
    sessions,
)
from cuba_memorys.server.tools import sync as sync_tools
from cuba_memorys.server.tools import workflow as workflow_tools
from cuba_memorys.services import answers as A
from cuba_memorys.services import audit as audit_svc
from cuba_memorys.services import calibration as calibration_svc
from cuba_memorys.services import grounding as judging
from cuba_memorys.services import incidents as incident_svc
from cuba_memorys.services import reminders as reminder_svc
from cuba_memorys.services.agents import artifacts as artifact_svc
from cuba_memorys.services.agents import contexto, whoami
from cuba_memorys.services.graph import analysis as graph_analysis
from cuba_memorys.services.graph import answers as G
from cuba_memorys.services.graph import (
    entities,
    episodes,
    hipotesis,
    predict,
    projects,
    reflexion,
    relations,
    reports,
    vigia,
)
from cuba_memorys.services.lifecycle import answers as L
from cuba_memorys.services.lifecycle import feedback, forget, zafra
from cuba_memorys.services.observations import ingest, write
from cuba_memorys.services.search import faro, hipocampo, verify
from cuba_memorys.services.sessions import compaction
from cuba_memorys.services.sessions import sessions as session_svc
from cuba_memorys.services.sync import conflicts as sync_conflicts
from cuba_memorys.services.sync import export as sync_export
from cuba_memorys.services.sync import importer as sync_import
from cuba_memorys.services.sync import peers as sync_peers
from cuba_memorys.services.workflow import decisions, procedures, working_memory

ALIAS_PREFIX = "memory_"
META_TOOLS = ("cuba_tools", "cuba_call")
# What the runtime can hand a service besides the tool's arguments: the client's own model as
# a judge (None when the client cannot sample), and as a plain prompt → text function.
# ``progress`` reports a long action's progress when the client sent a progress token.
# ``caller`` is what the MCP context says of the caller (whoami.Caller: its MCP session, transport,
# whether it can sample, its principal).
NEEDS = ("sampler", "ask", "progress", "caller")


@dataclass(frozen=True)
class Action:
    """One action of a tool: the service it calls with the parameters it reads."""

    name: str  # the value of the tool's selector ("" for a tool without actions)
    service: Callable[..., Any]  # service(memory, client, **{param: value}, **needs)
    answer: Any  # the TypedDict of its answer (services/answers.py); str for text answers
    params: tuple[str, ...] = ()  # the tool parameters it reads (passed by name)
    required: tuple[str, ...] = ()  # of those, the ones that must be given
    needs: tuple[str, ...] = ()  # of NEEDS
    role: str = ""  # the grant a principal needs (services/access.py); "" = reader if read-only, else writer


@dataclass(frozen=True)
class Tool:
    name: str
    family: str
    description: str
    signature: Callable[..., Any] | None  # the tool function (server/tools/); None for meta tools
    actions: tuple[Action, ...] = ()
    selector: str = "action"  # the parameter that picks the action; "" when there is one
    read_only: bool = False  # changes nothing stored (bookkeeping such as access counts aside)
    destructive: bool = False  # some action deletes or overwrites
    profiles: frozenset[str] = field(default_factory=frozenset)  # besides "full", which lists all
    # Also served as memory_<suffix> (True), under this name (the original's special cases, such
    # as memory_artifact), or not at all (False); hidden_aliases are callable but never listed.
    alias: bool | str = True
    hidden_aliases: tuple[str, ...] = ()

    @property
    def alias_name(self) -> str | None:
        if isinstance(self.alias, str):
            return self.alias
        return ALIAS_PREFIX + self.name.removeprefix("cuba_") if self.alias else None

    def action(self, name: str) -> Action | None:
        return next((a for a in self.actions if a.name == name), None)

    def role_of(self, action: Action) -> str:
        return action.role or ("reader" if self.read_only else "writer")


def _profiles(*names: str) -> frozenset[str]:
    return frozenset(names)


LEAN_AGENT_STANDARD = _profiles("lean", "agent", "standard")
AGENT_STANDARD = _profiles("agent", "standard")
STANDARD = _profiles("standard")
LEAN = _profiles("lean")
SECRET = ("allow_secret",)

TOOLS: tuple[Tool, ...] = (
    # -- graph ---------------------------------------------------------------------------------
    Tool("cuba_alma", "graph", "Entities of the knowledge graph: create, update (rename), delete (cascades to"
         " observations, episodes and relations) or get one with its observations and relations.",
         graph.cuba_alma, destructive=True, profiles=AGENT_STANDARD, actions=(
             Action("create", entities.create, A.EntityCreated, ("name", "entity_type"), ("name",)),
             Action("update", entities.rename, A.EntityRenamed, ("name", "new_name"), ("name", "new_name")),
             Action("delete", entities.delete, A.EntityDeleted, ("name",), ("name",), role="admin"),
             Action("get", entities.get, A.EntityRead, ("name",), ("name",), role="reader"),
         )),
    Tool("cuba_puente", "graph", "Relations between entities: create (repeating strengthens the edge), delete,"
         " traverse the graph (up to 5 hops), infer transitive connections, or predict missing links (Adamic-Adar;"
         " persist=true writes them as related_to edges with provenance predicted, never changing existing ones).",
         graph.cuba_puente, destructive=True, profiles=AGENT_STANDARD, actions=(
             Action("create", relations.create, A.RelationCreated,
                    ("from_entity", "to_entity", "relation_type", "bidirectional"), ("from_entity", "to_entity")),
             Action("delete", relations.delete, A.RelationDeleted, ("from_entity", "to_entity", "relation_type"),
                    ("from_entity", "to_entity"), role="admin"),
             Action("traverse", relations.traverse, A.Traversal, ("start_entity", "max_depth", "limit"),
                    ("start_entity",), role="reader"),
             Action("infer", relations.infer, A.Inference, ("start_entity", "max_depth", "limit"), ("start_entity",),
                    role="reader"),
             Action("predict", predict.predict, G.Prediction, ("entity_name", "start_entity", "persist", "limit")),
         )),
    Tool("cuba_proyecto", "graph", "Projects: list, current, switch, stats (rows per kind), rename, merge (moves"
         " every row of one project into another and deletes it; same-name entities and recipes are combined),"
         " backfill (gives every row of no project the named project; a dry run unless confirm=true, undoable)."
         " Writes are tagged with the active project; reads see it plus rows without a project.",
         graph.cuba_proyecto, destructive=True, profiles=AGENT_STANDARD, actions=(
             Action("list", projects.list_all, A.ProjectList, role="reader"),
             Action("current", projects.current, A.ProjectCurrent, role="reader"),
             Action("switch", projects.switch, A.ProjectSwitched, ("name",), ("name",), role="reader"),
             Action("stats", projects.stats, A.ProjectStats, ("name",), role="reader"),
             Action("rename", projects.rename, A.ProjectRenamed, ("name", "to"), ("name", "to"), role="admin"),
             Action("merge", projects.merge, A.ProjectMerged, ("name", "to"), ("name", "to"), role="admin"),
             Action("backfill", projects.backfill, A.ProjectBackfill, ("name", "confirm"), ("name",), role="admin"),
         )),
    # -- observations --------------------------------------------------------------------------
    Tool("cuba_cronica", "observations", "Write what you learn: add an observation (auto-creates the entity;"
         " near-duplicates are not stored twice), batch_add up to 100 (ids returned in input order), list,"
         " delete; episodes (episode_add/episode_list) and an entity's timeline.",
         observations.cuba_cronica, destructive=True, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("add", write.add, A.ObservationAdded, ("entity_name", "content", "observation_type", "source",
                                                           "created_at", "trust", "anchors", *SECRET),
                    ("entity_name", "content")),
             Action("batch_add", write.batch_add, A.BatchAdded, ("observations", *SECRET), ("observations",),
                    needs=("progress",)),
             Action("delete", write.delete, A.ObservationDeleted, ("observation_id", "id"), role="admin"),
             Action("list", write.list_for, A.ObservationList, ("entity_name",), ("entity_name",), role="reader"),
             Action("episode_add", episodes.add, A.EpisodeAdded,
                    ("entity_name", "content", "actors", "artifacts", "created_at", *SECRET),
                    ("entity_name", "content")),
             Action("episode_list", episodes.list_for, A.EpisodeList, ("entity_name",), ("entity_name",),
                    role="reader"),
             Action("timeline", episodes.timeline, A.Timeline, ("entity_name",), ("entity_name",), role="reader"),
         )),
    Tool("cuba_ingesta", "observations", "Bulk writes: ingest up to 200 observations (invalid items are reported"
         " by index, valid ones stored), parse a text into typed observations (one per paragraph: decision,"
         " lesson, error, solution, preference or fact by cue words), or auto_extract facts with your own model"
         " (MCP sampling; without it the answer says degraded). untrusted stores everything quarantined.",
         observations.cuba_ingesta, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("ingest", ingest.ingest, A.Ingested, ("items", "untrusted", *SECRET), ("items",),
                    needs=("progress",)),
             Action("parse", ingest.parse, A.Parsed | A.ParsedNothing, ("entity_name", "text", "untrusted", *SECRET),
                    ("entity_name", "text")),
             Action("auto_extract", ingest.auto_extract, A.Extracted | A.ExtractDegraded,
                    ("text", "entity_hint", "supersede_conflicts", "untrusted", "budget_secs", *SECRET), ("text",),
                    needs=("ask", "sampler")),
         )),
    # -- search --------------------------------------------------------------------------------
    Tool("cuba_faro", "search", "Search memory BEFORE answering, to ground what you say. Hybrid search"
         " (full-text + BM25 + vectors, score fusion) over entities, observations, episodes and errors, scoped to"
         " the active project; optional time window, tags and an exact token budget. mode=verify checks a claim"
         " against stored evidence (verified/partial/weak/unknown/contradicted).",
         search.cuba_faro, selector="mode", read_only=True, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("hybrid", faro.faro, A.SearchAnswer,
                    ("query", "scope", "limit", "before", "after", "as_of", "format", "tags", "max_tokens",
                     "enable_bm25",
                     "diversify", "mmr_lambda", "abstain_ood", "ood_threshold", "rerank", "associative",
                     "include_unscoped", "track_access", "context"), ("query",)),
             Action("verify", verify.verify, A.VerifyAnswer, ("query", "format"), ("query",), needs=("sampler",)),
         )),
    Tool("search_hipocampo", "search", search.HIPOCAMPO_DESCRIPTION, search.search_hipocampo, selector="",
         read_only=True, alias=False, actions=(
             Action("", hipocampo.search, str, hipocampo.SEARCH_ARGS),
         )),
    # -- grounding -----------------------------------------------------------------------------
    Tool("cuba_juez", "grounding", "Judge how two stored observations relate (contradicts, supersedes,"
         " complementary, unrelated, unknown), or scan an entity's ambiguous pairs (embedding cosine 0.6-0.8)."
         " Judgments are cached; the answer names the judge (nli, sampling, heuristic).",
         grounding.cuba_juez, actions=(
             Action("judge_pair", judging.judge_pair, A.PairJudged, ("observation_a", "observation_b"),
                    ("observation_a", "observation_b"), needs=("sampler",)),
             Action("scan_entity", judging.scan_entity, A.EntityScanned, ("entity_name", "max_pairs"),
                    ("entity_name",), needs=("sampler",)),
         )),
    Tool("cuba_contradiccion", "grounding", "Scan stored observations for contradictions (cosine 0.3-0.85 with"
         " negation markers in English and Spanish, confirmed by the judge chain).",
         grounding.cuba_contradiccion, profiles=STANDARD, actions=(
             Action("scan", judging.scan_contradictions, A.ContradictionScan, ("entity_name",), needs=("sampler",)),
         )),
    # -- workflow ------------------------------------------------------------------------------
    Tool("cuba_decreto", "workflow", "Decisions: record one (title, context, alternatives, chosen, rationale;"
         " stored as a decision observation that never decays), query them by meaning (up to 10, similarity"
         " > 0.2) or list the 20 newest.",
         workflow_tools.cuba_decreto, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("record", decisions.record, A.DecisionRecorded,
                    ("title", "context", "alternatives", "chosen", "rationale", *SECRET)),
             Action("query", decisions.query, A.DecisionQuery, ("query",), ("query",), role="reader"),
             Action("list", decisions.list_recent, A.DecisionList, role="reader"),
         )),
    Tool("cuba_receta", "workflow", "Procedures (recipes) that worked: add (steps [{do, run?, expect?}];"
         " re-adding a name updates it and keeps its counts), get (with markdown), search and list ranked by"
         " reliability (Wilson 95% lower bound of successes), outcome (record success or failure), delete.",
         workflow_tools.cuba_receta, destructive=True, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("add", procedures.add, A.Recipe,
                    ("name", "steps", "trigger", "preconditions", "verification", *SECRET), ("name", "steps")),
             Action("get", procedures.get, A.Recipe, ("name",), ("name",), role="reader"),
             Action("search", procedures.search, A.RecipeSearch, ("query", "limit"), ("query",), role="reader"),
             Action("outcome", procedures.outcome, A.Recipe, ("name", "success"), ("name", "success")),
             Action("list", procedures.list_all, A.RecipeList, ("limit",), role="reader"),
             Action("delete", procedures.delete, A.RecipeDeleted, ("name",), ("name",), role="admin"),
         )),
    Tool("cuba_pizarra", "workflow", "Working memory: short-lived notes of this client's session (write with a"
         " TTL, default 3600 s; read up to 100 unexpired notes; clear by tag or all). Expired notes are never"
         " returned.",
         workflow_tools.cuba_pizarra, destructive=True, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("write", working_memory.write, A.NoteWritten, ("content", "tag", "ttl_seconds", *SECRET),
                    ("content",)),
             Action("read", working_memory.read, A.NotesRead, ("tag",), role="reader"),
             Action("clear", working_memory.clear, A.NotesCleared, ("tag",)),
         )),
    # -- sessions ------------------------------------------------------------------------------
    Tool("cuba_jornada", "sessions", "Work sessions, one open per client: start (name, goals, project; shows"
         " how the previous session ended), end (outcome, summary; returns what the session wrote by type), list,"
         " current (with a hint when it is time to snapshot before a context compaction). Writes made during a"
         " session are tagged with it.",
         sessions.cuba_jornada, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("start", session_svc.start, A.SessionStarted, ("name", "goals", "project", *SECRET)),
             Action("end", session_svc.end, A.SessionEnded, ("outcome", "summary", *SECRET)),
             Action("list", session_svc.list_all, A.SessionList, role="reader"),
             Action("current", session_svc.current, A.SessionCurrent, role="reader"),
         )),
    Tool("cuba_pre_compact", "sessions", "Before your context is compacted, snapshot what this session knows"
         " (key observations, decisions, unresolved errors, rows not yet embedded, goals, and a markdown"
         " summary); restore it afterwards.",
         sessions.cuba_pre_compact, profiles=AGENT_STANDARD, actions=(
             Action("snapshot", compaction.snapshot, A.Snapshot),
             Action("restore", compaction.restore, A.Restored),
         )),
    # -- incidents -----------------------------------------------------------------------------
    Tool("cuba_alarma", "incidents", "Report an error you hit (type, message, context). Answers how many similar"
         " errors were seen before, known solutions, and a pattern_warning when it recurred 3+ times.",
         incidents.cuba_alarma, selector="", profiles=LEAN_AGENT_STANDARD, actions=(
             Action("", incident_svc.report, A.ErrorReported,
                    ("error_type", "error_message", "context", "project", *SECRET), ("error_type", "error_message")),
         )),
    Tool("cuba_remedio", "incidents", "Resolve a reported error with the solution that worked; lists similar"
         " errors that are still unresolved.",
         # Resolving an error again replaces its solution (the answer returns the previous one).
         incidents.cuba_remedio, selector="", destructive=True, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("", incident_svc.resolve, A.ErrorResolved, ("error_id", "solution", *SECRET),
                    ("error_id", "solution")),
         )),
    Tool("cuba_expediente", "incidents", "Search past errors and their solutions (up to 20). Pass"
         " proposed_action before trying a fix: it warns when that approach already failed.",
         incidents.cuba_expediente, selector="", read_only=True, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("", incident_svc.search, A.ErrorSearch, ("query", "project", "resolved_only", "proposed_action"),
                    ("query",)),
         )),
    # -- reminders -----------------------------------------------------------------------------
    Tool("cuba_centinela", "reminders", "Reminders: create one (entity_pattern glob, condition_type on_access |"
         " on_session_start | on_error_match, message, max_fires default 1 or -1 unlimited, expires_at), list,"
         " delete, check (fires the matching ones). Fired reminders also appear as triggered_reminders in the"
         " answer of the call that met them (cuba_alma get, cuba_cronica add/batch_add/list, cuba_ingesta,"
         " cuba_jornada start, cuba_alarma).",
         reminders.cuba_centinela, destructive=True, profiles=STANDARD, actions=(
             Action("create", reminder_svc.create, A.TriggerCreated,
                    ("entity_pattern", "condition_type", "message", "max_fires", "expires_at", *SECRET),
                    ("entity_pattern", "condition_type", "message")),
             Action("list", reminder_svc.list_all, A.TriggerList, role="reader"),
             Action("delete", reminder_svc.delete, A.TriggerDeleted, ("trigger_id",), ("trigger_id",)),
             Action("check", reminder_svc.check, A.TriggerCheck, ("entity_pattern", "condition_type"),
                    ("entity_pattern",)),
         )),
    # -- graph analysis (issue 14): cuba_vigia --------------------------------------------------
    Tool("cuba_vigia", "graph", "Watch the memory as a whole: summary (what it holds, estimated tokens), health"
         " (importance, stale and unused rows, embedding coverage, size, the entropy of entity and observation"
         " types, error resolution rate and time), drift (chi-squared of this week's error types against the"
         " month before), communities, bridges, structural (graph metrics).",
         graph.cuba_vigia, selector="metric", read_only=True, actions=(
             Action("summary", vigia.summary, vigia.Summary),
             Action("health", vigia.health, vigia.Health),
             Action("drift", vigia.drift, vigia.Drift),
             Action("communities", graph_analysis.vigia_communities, graph_analysis.VigiaCommunities),
             Action("bridges", reports.cached("bridges", graph_analysis.vigia_bridges), graph_analysis.VigiaBridges),
             Action("structural", reports.cached("structural", graph_analysis.vigia_structural),
                    graph_analysis.VigiaStructural),
         )),
    # -- graph reasoning (issue 14): cuba_reflexion, cuba_hipotesis ------------------------------
    Tool("cuba_reflexion", "graph", "Reflect on the knowledge graph's gaps: isolated entities, important ones with"
         " few relations, entity types no relation joins, entities with many facts but no decision or lesson, and"
         " unusually dense entities (|z| > 2), each with a one-sentence recommendation.",
         graph.cuba_reflexion, read_only=True, profiles=STANDARD, actions=(
             Action("analyze", reports.cached("reflexion", reflexion.analyze), G.Reflection),
         )),
    Tool("cuba_hipotesis", "graph", "Explain an effect: walk backwards from it over causes, related_to and"
         " depends_on relations (no cycles, max_depth 1-5) and rank the candidate causes by path strength x"
         " importance.",
         graph.cuba_hipotesis, read_only=True, profiles=STANDARD, actions=(
             Action("explain", hipotesis.explain, G.Hypotheses, ("effect", "max_depth", "limit"), ("effect",)),
         )),
    # -- calibration (issue 14): cuba_calibrar ---------------------------------------------------
    Tool("cuba_calibrar", "calibration", "Calibration of verify (cuba_faro mode=verify): resolve a logged verify"
         " call as correct or incorrect (updating the Beta trust of each source behind the claim's evidence),"
         " stats per grounding level, history, source trust, and metrics (Brier score, ECE over 10 bins, the"
         " reliability diagram).",
         calibration.cuba_calibrar, profiles=STANDARD, actions=(
             Action("stats", calibration_svc.stats, calibration_svc.CalibrationStats, role="reader"),
             Action("history", calibration_svc.history, calibration_svc.CalibrationHistory, ("limit",),
                    role="reader"),
             Action("resolve", calibration_svc.resolve, calibration_svc.CalibrationResolved,
                    ("verify_id", "outcome"), ("verify_id", "outcome")),
             Action("trust", calibration_svc.trust, calibration_svc.CalibrationTrust, role="reader"),
             Action("metrics", calibration_svc.metrics, calibration_svc.CalibrationMetrics, role="reader"),
         )),
    # -- lifecycle -----------------------------------------------------------------------------
    Tool("cuba_zafra", "lifecycle", "Maintenance: decay (stratified by type; decisions and lessons never decay),"
         " prune rows below an importance threshold (a dry run unless confirm=true), merge near-identical rows of"
         " one entity, summarize an entity's rows into one (merged and summarized rows are kept as superseded),"
         " stats, pagerank (weighted PageRank stored per entity and blended into importance), communities (Leiden,"
         " stored per entity), find_duplicates, export, reembed, decay_episodes. What prune, merge and summarize"
         " change is audited and can be undone with `cuba-memorys undo FILE`.",
         lifecycle.cuba_zafra, destructive=True, actions=(
             Action("decay", zafra.decay, L.Decayed, ("halflife_days",)),
             Action("prune", zafra.prune, L.Pruned, ("threshold", "confirm"), role="admin"),
             Action("merge", zafra.merge, L.Merged, ("similarity_threshold",), role="admin"),
             Action("summarize", zafra.summarize, L.Summarized,
                    ("entity_name", "compressed_summary", *SECRET), ("entity_name", "compressed_summary"),
                    role="admin"),
             Action("stats", zafra.stats, L.MemoryStats, role="reader"),
             Action("pagerank", graph_analysis.pagerank, graph_analysis.PageRanked),
             Action("communities", graph_analysis.communities, graph_analysis.CommunitiesFound),
             Action("find_duplicates", zafra.find_duplicates, L.Duplicates, role="reader"),
             Action("export", zafra.export, L.Exported, role="reader"),
             Action("reembed", zafra.reembed, L.Reembedded, ("batch_size",), needs=("progress",)),
             Action("decay_episodes", zafra.decay_episodes, L.EpisodesDecayed, ("c", "beta")),
         )),
    Tool("cuba_eco", "lifecycle", "Tell the memory what was right or wrong: positive / negative feedback on an"
         " observation or entity (bounded update), correct an observation's text (the old text is kept in its"
         " history), promote or quarantine an observation, episode or error, and list what waits in quarantine"
         " (pending).",
         lifecycle.cuba_eco, profiles=STANDARD, actions=(
             Action("positive", feedback.positive, L.Boosted, ("entity_name", "observation_id")),
             Action("negative", feedback.negative, L.Decreased, ("entity_name", "observation_id")),
             Action("correct", feedback.correct, L.Corrected, ("observation_id", "correction", *SECRET),
                    ("observation_id", "correction")),
             Action("promote", feedback.promote, L.TrustChanged, ("kind", "observation_id", "id"), role="admin"),
             Action("quarantine", feedback.quarantine, L.TrustChanged, ("kind", "observation_id", "id")),
             Action("pending", feedback.pending, L.Pending, ("limit",), role="reader"),
         )),
    Tool("cuba_forget", "lifecycle", "Forget an entity and everything about it (observations, episodes,"
         " relations, facts, the errors and sessions that name it, judgments and verify-log rows quoting it, its"
         " vectors and index entries), in one transaction. confirm=true is required; this cannot be undone. The"
         " audit log keeps that a forget happened, not what was forgotten.",
         lifecycle.cuba_forget, selector="", destructive=True, actions=(
             Action("", forget.forget, L.Forgotten, ("entity_name", "confirm"), ("entity_name",), role="admin"),
         )),
    # -- audit ---------------------------------------------------------------------------------
    Tool("cuba_archivo", "audit", "The audit log: a hash chain (HMAC-SHA256 with CUBA_AUDIT_KEY, else plain"
         " SHA-256) of every destructive or trust-changing action. append an event, verify the chain (finds the"
         " first broken link), tail the newest events. Rows can never be changed or removed.",
         audit.cuba_archivo, actions=(
             Action("append", audit_svc.append, L.AuditAppended, ("event_action", "payload"), ("event_action",)),
             Action("verify", audit_svc.verify, L.AuditVerified, ("limit",), role="reader"),
             Action("tail", audit_svc.tail, L.AuditTail, ("limit",), role="reader"),
         )),
    # -- agents (issue 16): several agents on one daemon ------------------------------------------
    Tool("cuba_whoami", "agents", "Who you are to this memory server: your client id, MCP session, open work"
         " session, active project and node; whether row-level security binds the database; which judges can"
         " rule on a claim here (NLI model, your own model through sampling, a local CLI LLM); the resource plan;"
         " and the HTTP endpoints (/mcp, /connect, /events).",
         agent_tools.cuba_whoami, selector="", read_only=True, profiles=LEAN_AGENT_STANDARD, actions=(
             Action("", whoami.whoami, whoami.WhoAmI, needs=("caller",)),
         )),
    Tool("cuba_contexto", "agents", "Your context at the start of a turn, in one call and within budget_chars"
         " (default 12000): your working memory (cuba_pizarra, 20 newest), notes other agents left for your client"
         " id (cuba_centinela on_session_start with entity_pattern = your client id), the shared artifacts"
         " (cuba_artefacto, 30 newest) and top recall (this session's observations, those about entities your"
         " notes name, the project's most important; 15 at most). Over budget the layers become a truncated"
         " preview, and the answer says so.",
         agent_tools.cuba_contexto, selector="", read_only=True, profiles=LEAN_AGENT_STANDARD,
         alias="memory_context", hidden_aliases=("memory_contexto",), actions=(
             Action("", contexto.contexto, contexto.Contexto, ("budget_chars",)),
         )),
    # -- artifacts (issue 16): shared texts between agents ------------------------------------------
    Tool("cuba_artefacto", "artifacts", "Shared, versioned text artifacts between agents (plans, specs, checklists),"
         " one per path in the active project: list (by prefix), get (or an earlier version), put (optimistic"
         " concurrency: pass the base_version you read; a stale one is refused with the current version and"
         " content_hash), patch (find must occur exactly once; applied atomically), lock / unlock (leases of 5-3600"
         " s that free themselves), watch_hint (the /events stream of changes). Content up to 2 MiB; credentials"
         " refused unless allow_secret. Nothing is lost: every replaced version is kept (the newest 50 per"
         " artifact) and get version=N reads it.",
         # put and patch overwrite the current text (the replaced version is kept, not deleted).
         artifact_tools.cuba_artefacto, destructive=True, profiles=LEAN_AGENT_STANDARD,
         alias="memory_artifact", hidden_aliases=("memory_artefacto",), actions=(
             Action("list", artifact_svc.list_all, artifact_svc.ArtifactList, ("prefix", "limit"), role="reader"),
             Action("get", artifact_svc.get, artifact_svc.ArtifactRead, ("path", "version"), ("path",),
                    role="reader"),
             Action("put", artifact_svc.put, artifact_svc.ArtifactWritten,
                    ("path", "content", "base_version", *SECRET), ("path", "content")),
             Action("patch", artifact_svc.patch, artifact_svc.ArtifactWritten, ("path", "find", "replace", *SECRET),
                    ("path", "find")),
             Action("lock", artifact_svc.lock, artifact_svc.ArtifactLocked, ("path", "ttl_seconds"), ("path",)),
             Action("unlock", artifact_svc.unlock, artifact_svc.ArtifactUnlocked, ("path",), ("path",)),
             Action("watch_hint", artifact_svc.watch_hint, artifact_svc.ArtifactWatchHint, role="reader"),
         )),
    # -- sync (issue 17): the memory as a bundle that travels with the code through git -----------
    Tool("cuba_sync", "sync", "Sync the memory between machines through git: export writes the bundle (one JSON"
         " file per entity with its observations, episodes by month, errors, relations, facts, procedures,"
         " projects, source trust, tombstones, artifacts, optional zstd embeddings, and a manifest whose hash"
         " covers every file) into dir (default $CUBA_SYNC_DIR, else .cuba-memorys/ at the repository's top),"
         " rewriting only files that changed; scope project (default) or all. status: the bundle there, whether"
         " it waits to be imported, recent imports, open peer notices."
         " Read-only peers (another machine's serve, with CUBA_PEER_TOKEN): pull pages this memory's whole bundle"
         " (offset, limit, manifest_hash of the first page), notify records a peer's summary (shown at"
         " cuba_jornada start), fetch pulls a peer (url, else the stored peer's, else CUBA_PEER_URL) and imports it,"
         " stopping early when nothing changed.",
         # export writes files on the server's machine (a folder the caller names): operators only.
         sync_tools.cuba_sync, destructive=True, actions=(
             Action("export", sync_export.export, sync_export.SyncExported,
                    ("dir", "scope", "with_embeddings", "force"),
                    role="admin"),
             Action("status", sync_export.status, sync_export.SyncStatus, ("dir",), role="reader"),
             Action("import", sync_import.import_bundle, sync_import.SyncImported,
                    ("dir", "conflict", "confirm", "deletes"), role="admin"),
             Action("diff", sync_conflicts.diff, sync_conflicts.SyncDiff, ("dir",), role="admin"),
             Action("conflicts", sync_conflicts.conflicts, sync_conflicts.SyncConflicts, role="reader"),
             Action("resolve", sync_conflicts.resolve, sync_conflicts.SyncResolved, ("id", "keep"), ("id",)),
             # read-only peers (services/sync/peers.py): pull and notify cover the whole store, so the
             # peer token, the operator or a '*' admin only (server/runtime.py WHOLE_STORE)
             Action("pull", sync_peers.pull, sync_peers.SyncPulled,
                    ("with_embeddings", "limit", "offset", "manifest_hash"), role="admin"),
             Action("notify", sync_peers.notify, sync_peers.SyncNotified,
                    ("summary", "node_id", "node_name", "manifest_hash"), ("summary", "node_id"), role="admin"),
             Action("fetch", sync_peers.fetch, sync_peers.SyncFetched,
                    ("peer", "url", "conflict", "confirm", "deletes"), role="admin"),
         )),
    # -- meta: the catalogue itself (server/tools/meta.py) ---------------------------------------
    Tool("cuba_tools", "meta", "Find tools and load their schemas on demand ({count}). Under CUBA_TOOL_PROFILE=lean"
         " only the everyday core is advertised; every other tool is listed here (query filters by name or"
         " description; detail=names|summary|full) and invoked with cuba_call.",
         None, read_only=True, profiles=LEAN),
    Tool("cuba_call", "meta", "Invoke any tool by name with its arguments object — including tools not advertised"
         " by this server's profile. Same validation and behaviour as calling it directly; its errors come back"
         " as that tool's error. Find names and schemas with cuba_tools.",
         # It reaches every tool, deleting ones included.
         None, destructive=True, profiles=LEAN),
)



def _counted(tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
    """cuba_tools says how many tools there are (as the original's does), counted here so it stays true."""
    count = (f"{len(tools)} tools: {sum(t.family != 'meta' for t in tools)} plus"
             f" {' and '.join(t.name for t in tools if t.family == 'meta')}")
    return tuple(replace(t, description=t.description.replace("{count}", count)) if t.name == "cuba_tools" else t
                 for t in tools)


TOOLS = _counted(TOOLS)
BY_NAME: dict[str, Tool] = ({t.name: t for t in TOOLS} | {t.alias_name: t for t in TOOLS if t.alias_name}
                            | {name: t for t in TOOLS for name in t.hidden_aliases})
# Callable names tools/list never shows, under any profile (the original's second spellings).
HIDDEN: frozenset[str] = frozenset(name for t in TOOLS for name in t.hidden_aliases)


def tool(name: str) -> Tool | None:
    """The catalogue row of a tool, by its name or its memory_* alias."""
    return BY_NAME.get(name)


def advertised(profile: str) -> frozenset[str] | None:
    """The names tools/list shows under ``profile`` (None: every registered name, but never the
    HIDDEN ones). Each tool is listed with its memory_* alias under every profile, as the newest
    original lists them; an alias costs a few tokens there (server/listing.py)."""
    if profile == "full":
        return None
    return frozenset(name for t in TOOLS if profile in t.profiles for name in (t.name, t.alias_name) if name)


def catalogue() -> list[Tool]:
    """What cuba_tools lists and cuba_call reaches: every tool but the meta tools (aliases are
    the same tools under a second name)."""
    return [t for t in TOOLS if t.family != "meta"]


PROFILES = TOOL_PROFILES  # validated by Settings (config.py); tests check every row names only these
