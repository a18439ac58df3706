"""The command line, run as a user would: the installed `cuba-memorys` executable in a subprocess.

Each test has its own data folder (CUBA_DATA_DIR); CUBA_* settings from the user's environment
are removed so they cannot change the outcome.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import StoreLocation
from cuba_memorys import __version__

CLI = Path(sys.executable).with_name("cuba-memorys")
E5, MINILM = "multilingual-e5-small", "all-MiniLM-L6-v2"


@pytest.fixture
def where(location: StoreLocation) -> StoreLocation:
    return location


def cli(where: StoreLocation, *args: str, model: str | None = None, check: int | None = 0,
        stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess:
    env = where.env(**({"CUBA_EMBED_MODEL": model} if model is not None else {}))
    proc = subprocess.run([str(CLI), *args], env=env, stdin=stdin, capture_output=True, text=True,
                          timeout=120)
    if check is not None:
        assert proc.returncode == check, (
            f"`cuba-memorys {' '.join(args)}` exited {proc.returncode}, expected {check}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def cli_json(where: StoreLocation, *args: str, **kwargs) -> dict:
    return json.loads(cli(where, *args, "--json", **kwargs).stdout)


def doctor(where: StoreLocation, model: str | None = None, expect: int = 0) -> dict:
    return cli_json(where, "doctor", model=model, check=expect)


# -- basics ---------------------------------------------------------------------------------------

def test_version(where: StoreLocation) -> None:
    """-V, --version and the original's `version` verb print "cuba-memorys X" (the shape of the
    original's "memory-industry X") and open no store."""
    for args in (["--version"], ["-V"], ["version"]):
        assert cli(where, *args).stdout == f"cuba-memorys {__version__}\n", args
    assert not where.data_dir.exists()  # printing the version opens no store


def test_the_help_verb_prints_what_help_prints(where: StoreLocation) -> None:
    assert cli(where, "help").stdout == cli(where, "--help").stdout
    assert cli(where, "help", "sync", "export").stdout == cli(where, "sync", "export", "--help").stdout
    unknown = cli(where, "help", "nope", check=2)
    assert "no such command: nope" in unknown.stderr and unknown.stdout == ""
    assert not where.data_dir.exists()


@pytest.mark.parametrize("command", [[], ["serve"], ["search"], ["save"], ["doctor"], ["reembed"]])
def test_help(where: StoreLocation, command: list[str]) -> None:
    out = cli(where, *command, "--help").stdout
    assert out.startswith("Usage: cuba-memorys")
    if command:
        assert f"cuba-memorys {command[0]}" in out.splitlines()[0]
    else:
        for name in ("serve", "search", "save", "doctor", "reembed"):
            assert name in out
    assert not where.data_dir.exists()  # --help does not start a server or open a store


def test_cache_migrate_has_nothing_to_move_and_says_why(where: StoreLocation, tmp_path: Path) -> None:
    """The original's `cache migrate [--apply]` moves ~/.cache/cuba-memorys into ~/.cache/memory-industry;
    here the first is the folder this program reads, so nothing moves, and a script calling it goes on."""
    home = tmp_path / "home"
    (home / ".cache" / "cuba-memorys" / "models" / "nli").mkdir(parents=True)
    (home / ".cache" / "memory-industry").mkdir()
    before = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    env = {k: v for k, v in where.env().items() if k not in ("CUBA_MODELS_DIR", "CUBA_UNDO_DIR")}
    for args in (["cache", "migrate"], ["cache", "migrate", "--apply"]):
        proc = subprocess.run([str(CLI), *args], env={**env, "HOME": str(home)}, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "Nothing to move" in proc.stdout and str(home / ".cache" / "cuba-memorys") in proc.stdout
        assert "memory-industry (the original 0.27's cache) is not read here" in proc.stdout
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == before
    data = json.loads(subprocess.run([str(CLI), "cache", "migrate", "--json"], env={**env, "HOME": str(home)},
                                     capture_output=True, text=True, timeout=120).stdout)
    assert data["moved"] == [] and data["entries"] == ["models"] and data["reads"]["models"].startswith(str(home))


# -- save / search --------------------------------------------------------------------------------

def test_save_then_search(where: StoreLocation) -> None:
    deploy = "Deploys go out with blue-green switching behind the load balancer."
    saved = cli_json(where, "save", "deploy", deploy)
    assert saved["id"] and saved["embedded"] is True
    other = cli_json(where, "save", "db", "Nightly backups of PostgreSQL are kept for 30 days.", "--type", "decision")
    assert other["id"] != saved["id"]

    found = cli_json(where, "search", "how do we deploy with blue green")
    assert found["results"], found
    assert found["results"][0]["c"] == deploy
    assert found["results"][0]["id"] == saved["id"]
    assert not found.get("degraded")

    found = cli_json(where, "search", "backup retention", "--limit", "1")
    assert [row["id"] for row in found["results"]] == [other["id"]]

    plain = cli(where, "search", "blue green deploys").stdout
    assert deploy in plain and saved["id"] in plain
    assert plain.splitlines()[0].startswith(f" 1. [deploy] {deploy}")
    verbose = cli(where, "search", "blue green deploys", "--format", "verbose").stdout
    assert verbose.splitlines()[0].startswith(f" 1. [deploy] {deploy}")  # read by the verbose keys
    assert "[deploy] concept" in verbose  # the entity row itself: its name and type

    again = cli(where, "save", "deploy", deploy).stdout
    assert "Already known" in again and saved["id"] in again
    assert doctor(where)["counts"]["observations"] == 2


def test_save_refuses_credentials(where: StoreLocation) -> None:
    cli(where, "save", "ops", "The staging box is rebooted every Sunday.")
    before = doctor(where)

    refused = cli(where, "save", "ops", "the db password = hunter2hunter2", check=2)
    assert "password" in refused.stderr and "allow" in refused.stderr
    assert refused.stdout == ""
    refused = cli(where, "save", "new-entity", "password = hunter2hunter2", check=2)

    after = doctor(where)
    assert after["counts"] == before["counts"]
    assert after["embedding_coverage"] == before["embedding_coverage"]
    assert after["counts"]["entities"] == 1  # not even the entity was created

    # the opt-in still works
    cli(where, "save", "ops", "password = hunter2hunter2", "--allow-secret")
    assert doctor(where)["counts"]["observations"] == before["counts"]["observations"] + 1


def test_search_validates_limit(where: StoreLocation) -> None:
    proc = cli(where, "search", "x", "--limit", "0", check=2)
    assert "--limit" in proc.stderr


def test_unquoted_words_and_the_originals_short_flags(where: StoreLocation) -> None:
    """As the original: `save ENTITY words...` and `search words...` join their words, and
    -t is --type, -n is --limit; --associative reaches cuba_faro."""
    saved = cli_json(where, "save", "pool", "The", "pool", "allows", "max", "connections", "of", "40", "-t", "decision")
    cli(where, "save", "cache", "Redis keeps sessions for a day")
    stored = cli_json(where, "search", "max", "connections", "-n", "1")
    assert [r["id"] for r in stored["results"]] == [saved["id"]]
    top = stored["results"][0]
    assert top["c"] == "The pool allows max connections of 40" and top["t"] == "decision"
    associative = cli_json(where, "search", "pool", "connections", "--associative", "-n", "5")
    assert associative["results"][0]["id"] == saved["id"]
    plain = cli(where, "search", "max", "connections").stdout
    assert plain.startswith(" 1. [pool] The pool allows max connections of 40")


# -- doctor, degraded mode, reembed ---------------------------------------------------------------

def test_doctor_json(where: StoreLocation) -> None:
    cli(where, "save", "deploy", "Deploys go out with blue-green switching.")
    report = doctor(where)
    assert report["backend"] == where.backend
    if where.backend == "sqlite":
        assert Path(report["location"]) == where.data_dir / "memory.db"
    else:  # the URL, never its password
        assert report["location"].split("?")[0] == where.database_url.split("?")[0]
    assert report["migrations"]["pending"] == []
    assert report["migrations"]["applied"]
    assert report["model"]["loaded"] == E5
    assert report["model"]["dimension"] == 384
    assert report["model"]["stored_model"] == E5
    assert report["embedding_coverage"] == {"observations": 1, "embedded": 1, "missing": 0}
    assert report["ok"] is True and report["warnings"] == []
    if where.backend == "postgresql":
        assert report["database_role"] == {"role": "cuba_app", "superuser": False, "bypass_rls": False}
    else:
        assert report["database_role"] is None

    text = cli(where, "doctor").stdout
    assert "0 pending" in text and E5 in text and "1/1 observations embedded" in text


def test_doctor_warns_until_secure(where: StoreLocation, request) -> None:
    if where.backend == "sqlite":
        proc = cli(where, "secure", check=2)
        assert "PostgreSQL" in proc.stderr and "DATABASE_URL" in proc.stderr
        return
    # A database nobody secured yet (the test databases are cloned from a secured template).
    fresh = StoreLocation("postgresql", where.data_dir, request.getfixturevalue("postgres").new_database(empty=True))
    unsafe = doctor(fresh, expect=1)
    assert unsafe["database_role"] == {"role": "postgres", "superuser": True, "bypass_rls": True}
    assert any("superuser" in w and "cuba-memorys secure" in w for w in unsafe["warnings"])
    secured = cli_json(fresh, "secure", "--password", "s3cret-Pass")
    assert secured["role"] == "cuba_app" and secured["granted_to_login"] == "postgres"
    assert secured["url"].startswith("postgresql://cuba_app:s3cret-Pass@")
    assert doctor(fresh)["database_role"] == {"role": "cuba_app", "superuser": False, "bypass_rls": False}
    again = cli_json(fresh, "secure")  # re-running re-checks the role and keeps its password
    assert again["created"] is False and again["password"] is None
    bad = cli(fresh, "secure", "--role", "x; DROP TABLE meta", check=2)
    assert "role" in bad.stderr


def test_without_model_then_reembed(where: StoreLocation) -> None:
    texts = ["Deploys go out with blue-green switching behind the load balancer.",
             "Nightly backups of PostgreSQL are kept for 30 days."]
    for n, text in enumerate(texts):
        saved = cli_json(where, "save", f"topic-{n}", text, model="none")
        assert saved["embedded"] is False

    found = cli_json(where, "search", "blue-green deploys", model="none")
    assert found["degraded"] is True
    assert found["degraded_reason"]
    assert found["results"][0]["c"] == texts[0]  # lexical search still works

    proc = cli(where, "doctor", model="none", check=1)
    assert "WARNING" in proc.stdout and "no embedding" in proc.stdout and "reembed" in proc.stdout
    report = doctor(where, model="none", expect=1)
    assert report["model"]["loaded"] is None and report["model"]["reason"]
    assert report["embedding_coverage"] == {"observations": 2, "embedded": 0, "missing": 2}
    # with the model loaded but rows unembedded, doctor still complains
    assert doctor(where, expect=1)["embedding_coverage"]["missing"] == 2

    result = cli_json(where, "reembed", "--batch", "1")  # the original's --batch: one row per commit
    assert result["updated"] == 2 and result["model"] == E5 and result["dim"] == 384

    report = doctor(where)
    assert report["embedding_coverage"] == {"observations": 2, "embedded": 2, "missing": 0}
    assert report["ok"] is True
    found = cli_json(where, "search", "how long are database backups retained")
    assert "degraded" not in found
    assert found["results"][0]["c"] == texts[1]
    assert cli_json(where, "reembed")["updated"] == 0  # nothing left to do


def test_model_mismatch_is_refused(where: StoreLocation) -> None:
    cli(where, "save", "deploy", "Deploys go out with blue-green switching.")

    proc = cli(where, "search", "x", model="minilm", check=2)
    assert E5 in proc.stderr and MINILM in proc.stderr
    assert proc.stdout == ""

    # the stdio MCP server refuses to start, with the reason on stderr (stdin closed)
    proc = cli(where, model="minilm", check=None)
    assert proc.returncode != 0
    assert E5 in proc.stderr and MINILM in proc.stderr
    assert proc.stdout == ""  # nothing on the protocol stream

    # the data is untouched: the right model still finds it
    found = cli_json(where, "search", "blue-green")
    assert found["results"] and not found.get("degraded")


# Every verb, with arguments it would accept: each turns a CubaError into one line and status 2.
EVERY_VERB = [["doctor"], ["search", "x"], ["save", "e", "c"], ["recall"], ["reembed"], ["secure"], ["models"],
              ["principal", "list"],
              ["models", "install", "nli", "/nonexistent"], ["migrate", "--to", "postgresql://u@h/db"],
              ["eval", "--dataset", "/nonexistent"], ["calibrate", "--dataset", "/etc/hostname"],
              ["serve", "127.0.0.1:1"], ["delete", "x"], ["undo", "/nonexistent.json"], ["dedupe"], ["rem"], ["link"],
              ["project", "backfill", "nowhere"], ["sync", "status"], ["hook", "install"],
              ["dashboard", "/nonexistent/out.html"], ["export", "/nonexistent/vault", "--obsidian"],
              ["import", "/nonexistent.jsonl", "--format", "mcp-jsonl"], ["skills", "/nonexistent/skills"],
              ["anchors", "check"], ["codegraph", "build"], ["cache", "migrate"], []]


@pytest.mark.parametrize("args", EVERY_VERB, ids=lambda a: " ".join(a) or "(stdio)")
def test_every_verb_reports_a_bad_setting_in_one_line_with_status_2(where: StoreLocation, args: list[str]) -> None:
    """An unknown CUBA_MODE refuses to start, naming the accepted modes, whatever the verb."""
    proc = subprocess.run([str(CLI), *args], env=where.env(CUBA_MODE="turbo"), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "CUBA_MODE='turbo'" in lines[0] and "local" in lines[0] and "completo" in lines[0]


def test_every_verb_is_in_the_test_above() -> None:
    from cuba_memorys.cli import main

    covered = {args[0] for args in EVERY_VERB if args}
    # setup reads no setting (tests/test_discovery_cli.py); help and version open nothing (test_version)
    assert covered == set(main.commands) - {"setup", "help", "version"}


@pytest.mark.parametrize("mode, expected", [("cloud", "red"), ("nube", "red"), ("full", "completo"),
                                            ("LOCAL", "local"), ("", "local")])
def test_mode_aliases(monkeypatch, mode: str, expected: str) -> None:
    from cuba_memorys.config import Settings

    monkeypatch.setenv("CUBA_MODE", mode)
    assert Settings.from_env().mode == expected


def test_recall_diff_outside_a_git_repository_prints_the_recall_and_a_note(where: StoreLocation,
                                                                           tmp_path: Path) -> None:
    """A session-start hook running `recall --diff` in a folder that is no repository: the plain
    recall (status 0) with a one-line note, not a failure."""
    env = {k: v for k, v in where.env(CUBA_EMBED_MODEL="none").items() if k != "CUBA_CODE_ROOT"}
    plain = subprocess.run([str(CLI), "recall"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    proc = subprocess.run([str(CLI), "recall", "--diff"], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(plain.stdout.rstrip("\n"))
    assert proc.stdout.rstrip().splitlines()[-1].startswith("(--diff: no git repository here")
    data = json.loads(subprocess.run([str(CLI), "recall", "--diff", "--json"], env=env, cwd=tmp_path,
                                     capture_output=True, text=True, timeout=120).stdout)
    assert "no git repository" in data["note"] and "text" in data
