"""docs/conformance.md is scripts/conformance.py's output (the code against the original's spec
and README, ../shared), and every gap it finds carries the reason it is kept."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "conformance.py"
SHARED = ROOT.parent / "shared"
pytestmark = pytest.mark.skipif(not (SHARED / "spec").is_dir(), reason="the original's spec (../shared) is not here")


def script():
    spec = importlib.util.spec_from_file_location("conformance", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated() -> str:
    return subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True).stdout


def test_the_conformance_page_is_the_scripts_output():
    page = generated()
    assert (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8") == page, \
        "docs/conformance.md is stale: run `.venv/bin/python scripts/conformance.py > docs/conformance.md`"
    assert "UNEXPLAINED" not in page, "a gap with no reason: give it one in scripts/conformance.py KEPT"


def test_it_reads_the_original_and_the_code():
    """What the page rests on: the original's lists as the spec gives them, this build's from the code."""
    conf = script()
    spec, seeds = conf._read(SHARED / "spec"), conf._read(SHARED / "seeds")
    verbs = conf.original_verbs(spec)
    assert {"cache", "setup", "search", "help", "version"} <= set(verbs) and len(verbs) == 28
    assert verbs["setup"]["subs"] == {"check", "print", "hook", "claude", "mcp", "cursor"}
    assert verbs["sync"]["subs"] == {"export", "import", "diff", "status"}  # not --scope's values
    assert {"-n", "--limit", "--associative"} <= verbs["search"]["flags"]
    variables = conf.original_variables(spec, seeds)
    assert {"MEMORY_INDUSTRY_ENTITY_FACTOID", "CUBA_REM_EXTRACTION_BATCH", "MEMORY_INDUSTRY_LLM_BASE_URL",
            "MEMORY_INDUSTRY_GRAPH_URL"} <= variables  # shorthands ("… / _EXTRACTION_BATCH") expanded
    assert "cuba_whoami" in conf.original_tools(spec, seeds) and "cuba_app" not in conf.original_tools(spec, seeds)
    ours = conf.our_cli()
    assert {"print", "claude", "mcp", "cursor"} <= ours["setup"]["subs"] and "migrate" in ours["cache"]["subs"]
    assert {"-t", "--type"} <= ours["save"]["flags"] and "-d" in ours["sync"]["flags"]
    assert {"CUBA_CLIENT_ID", "MEMORY_INDUSTRY_CLIENT_ID", "MEMORY_INDUSTRY_ENTITY_FACTOID"} <= conf.our_variables()
