"""The docs are kept true by these tests (as sqlite-utils and datasette do theirs).

- Every tool the server registers, and every action of it, is in the README's tool table.
- A ``cuba_*`` / ``memory_*`` name written anywhere (README, docs/, the catalogue's descriptions,
  any string in src/: hints, notes, profiles) is a registered tool.
- Every ``CUBA_*`` variable Settings reads is in the README's configuration table, and every one
  the README or docs/ mention is read by Settings (benchmark scripts' own variables aside).
- Every CLI verb is in the README's command list, and docs/cli.md is the current ``--help``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cuba_memorys.server import catalog

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))}
SRC = ROOT / "src" / "cuba_memorys"
REGISTERED = {n for t in catalog.TOOLS for n in (t.name, t.alias_name, *t.hidden_aliases) if n}
TOOL_NAME = re.compile(r"\b(?:cuba|memory)_[a-z][a-z_]*[a-z]\b")
# Names of that shape that are not tools: the package, the PostgreSQL role and template database,
# parameter names, and identifiers that only look like tool names.
NOT_TOOLS = {"cuba_memorys", "cuba_app", "cuba_template", "cuba_project", "cuba_deadline", "memory_type",
             "memory_types", "memory_budget", "memory_industry"}
VARIABLE = re.compile(r"\bCUBA_[A-Z0-9_]*[A-Z0-9]\b")


def tool_names(text: str) -> set[str]:
    return {n for n in TOOL_NAME.findall(text) if n not in NOT_TOOLS and not n.startswith("cuba_memorys")}


def string_constants() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.setdefault(str(path.relative_to(ROOT)), []).append(node.value)
    return found


def readme_section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


# -- tools -------------------------------------------------------------------------------------
@pytest.mark.parametrize("tool", catalog.TOOLS, ids=lambda t: t.name)
def test_every_tool_and_action_is_in_the_readme(tool: catalog.Tool):
    row = next((line for line in readme_section("Tools").splitlines() if line.startswith(f"| `{tool.name}` |")), None)
    assert row is not None, f"README's tool table has no row for {tool.name}"
    for action in tool.actions:
        if action.name:
            assert f"`{action.name}`" in row, f"{tool.name}: action {action.name} is not in its README row"


# docs/conformance.md (scripts/conformance.py) names the original's tools and variables this build
# lacks, each in a row that says so: those names, and only those, may be unknown there.
CONFORMANCE = "conformance.md"


def declared_absent(text: str) -> set[str]:
    tools = set(re.findall(r"^\| `(cuba_[a-z_]+)` \| \*\*no\*\* \|", text, re.M))
    table = text.partition("The original's variables not read here:")[2].partition("\n## ")[0]
    return tools | set(re.findall(r"^\| `([A-Z0-9_]+)` \|", table, re.M))


def test_names_in_the_readme_and_docs_are_registered_tools():
    for name, text in {"README.md": README, **DOCS}.items():
        unknown = tool_names(text) - REGISTERED - (declared_absent(text) if name == CONFORMANCE else set())
        assert not unknown, f"{name} names tools that are not registered: {sorted(unknown)}"


def test_names_in_source_strings_are_registered_tools():
    """Descriptions, hints, notes and profiles: a name an agent is told to call must exist."""
    for path, strings in string_constants().items():
        unknown = set().union(*(tool_names(s) for s in strings)) - REGISTERED
        assert not unknown, f"{path} tells agents about tools that are not registered: {sorted(unknown)}"


# -- settings ----------------------------------------------------------------------------------
def settings_variables() -> set[str]:
    return set(VARIABLE.findall((SRC / "config.py").read_text(encoding="utf-8")))


def bench_variables() -> set[str]:
    return {v for p in (ROOT / "bench").glob("*.py") for v in VARIABLE.findall(p.read_text(encoding="utf-8"))
            if f'environ.get("{v}"' in p.read_text(encoding="utf-8")}


def test_every_variable_settings_reads_is_in_the_readme():
    table = readme_section("Configuration")
    missing = {v for v in settings_variables() if f"`{v}`" not in table}
    assert not missing, f"README's configuration table lacks {sorted(missing)}"


def test_every_documented_variable_is_read_by_settings():
    known = settings_variables() | bench_variables()
    for name, text in {"README.md": README, **DOCS}.items():
        unknown = set(VARIABLE.findall(text)) - known - (declared_absent(text) if name == CONFORMANCE else set())
        assert not unknown, f"{name} documents variables that nothing reads: {sorted(unknown)}"


def test_no_module_reads_cuba_variables_but_settings():
    for path in SRC.rglob("*.py"):
        if path.name == "config.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"environ(?:\.get)?\(\s*[\"']CUBA_|getenv\(\s*[\"']CUBA_|environ\[[\"']CUBA_", text), path


# -- the command line --------------------------------------------------------------------------
def cli_verbs() -> list[str]:
    from cuba_memorys.cli import main

    return sorted(main.commands)


def test_every_cli_verb_is_in_the_readme():
    listed = readme_section("Command line")
    missing = [v for v in cli_verbs() if f"cuba-memorys {v}" not in listed]
    assert not missing, f"README's command list lacks {missing}"


def test_the_cli_reference_is_the_current_help():
    generated = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_reference.py")], capture_output=True,
                               text=True, check=True).stdout
    assert DOCS.get("cli.md") == generated, "docs/cli.md is stale: run `.venv/bin/python scripts/cli_reference.py" \
                                            " > docs/cli.md`"


# -- paths ---------------------------------------------------------------------------------------
SOURCE_PATH = re.compile(r"\b(?:(?:services|storage|server|search|graph|embed|judge|cli)/[\w/]+\.(?:py|sql)"
                         r"|(?:bench|tests|scripts)/\w+\.py)\b")


def test_source_paths_in_the_docs_exist():
    """A doc that points at a file that moved or went away would send a reader nowhere."""
    for name, text in {"README.md": README, **DOCS}.items():
        for path in set(SOURCE_PATH.findall(text)):
            root = ROOT if path.split("/")[0] in ("bench", "tests", "scripts") else SRC
            assert (root / path).is_file(), f"{name} points at {path}, which does not exist"
