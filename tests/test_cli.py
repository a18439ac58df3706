"""The command line, run as a user would: the installed `cuba-memorys` executable in a subprocess.

Each test has its own data folder (CUBA_DATA_DIR); CUBA_* settings from the user's environment
are removed so they cannot change the outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuba_memorys import __version__

CLI = Path(sys.executable).with_name("cuba-memorys")
E5, MINILM = "multilingual-e5-small", "all-MiniLM-L6-v2"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def cli(data_dir: Path, *args: str, model: str | None = None, check: int | None = 0,
        stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
    env["CUBA_DATA_DIR"] = str(data_dir)
    if model is not None:
        env["CUBA_EMBED_MODEL"] = model
    proc = subprocess.run([str(CLI), *args], env=env, stdin=stdin, capture_output=True, text=True,
                          timeout=120)
    if check is not None:
        assert proc.returncode == check, (
            f"`cuba-memorys {' '.join(args)}` exited {proc.returncode}, expected {check}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def cli_json(data_dir: Path, *args: str, **kwargs) -> dict:
    return json.loads(cli(data_dir, *args, "--json", **kwargs).stdout)


def doctor(data_dir: Path, model: str | None = None, expect: int = 0) -> dict:
    return cli_json(data_dir, "doctor", model=model, check=expect)


# -- basics ---------------------------------------------------------------------------------------

def test_version(data_dir: Path) -> None:
    out = cli(data_dir, "--version").stdout
    assert out.strip() == f"cuba-memorys, version {__version__}"
    assert not data_dir.exists()  # printing the version opens no store


@pytest.mark.parametrize("command", [[], ["serve"], ["search"], ["save"], ["doctor"], ["reembed"]])
def test_help(data_dir: Path, command: list[str]) -> None:
    out = cli(data_dir, *command, "--help").stdout
    assert out.startswith("Usage: cuba-memorys")
    if command:
        assert f"cuba-memorys {command[0]}" in out.splitlines()[0]
    else:
        for name in ("serve", "search", "save", "doctor", "reembed"):
            assert name in out
    assert not data_dir.exists()  # --help does not start a server or open a store


# -- save / search --------------------------------------------------------------------------------

def test_save_then_search(data_dir: Path) -> None:
    deploy = "Deploys go out with blue-green switching behind the load balancer."
    saved = cli_json(data_dir, "save", "deploy", deploy)
    assert saved["id"] and saved["embedded"] is True
    other = cli_json(data_dir, "save", "db", "Nightly backups of PostgreSQL are kept for 30 days.", "--type", "decision")
    assert other["id"] != saved["id"]

    found = cli_json(data_dir, "search", "how do we deploy with blue green")
    assert found["results"], found
    assert found["results"][0]["c"] == deploy
    assert found["results"][0]["id"] == saved["id"]
    assert not found.get("degraded")

    found = cli_json(data_dir, "search", "backup retention", "--limit", "1")
    assert [row["id"] for row in found["results"]] == [other["id"]]

    plain = cli(data_dir, "search", "blue green deploys").stdout
    assert deploy in plain and saved["id"] in plain

    again = cli(data_dir, "save", "deploy", deploy).stdout
    assert "Already known" in again and saved["id"] in again
    assert doctor(data_dir)["counts"]["observations"] == 2


def test_save_refuses_credentials(data_dir: Path) -> None:
    cli(data_dir, "save", "ops", "The staging box is rebooted every Sunday.")
    before = doctor(data_dir)

    refused = cli(data_dir, "save", "ops", "the db password = hunter2hunter2", check=2)
    assert "password" in refused.stderr and "allow" in refused.stderr
    assert refused.stdout == ""
    refused = cli(data_dir, "save", "new-entity", "password = hunter2hunter2", check=2)

    after = doctor(data_dir)
    assert after["counts"] == before["counts"]
    assert after["embedding_coverage"] == before["embedding_coverage"]
    assert after["counts"]["entities"] == 1  # not even the entity was created

    # the opt-in still works
    cli(data_dir, "save", "ops", "password = hunter2hunter2", "--allow-secret")
    assert doctor(data_dir)["counts"]["observations"] == before["counts"]["observations"] + 1


def test_search_validates_limit(data_dir: Path) -> None:
    proc = cli(data_dir, "search", "x", "--limit", "0", check=2)
    assert "--limit" in proc.stderr


# -- doctor, degraded mode, reembed ---------------------------------------------------------------

def test_doctor_json(data_dir: Path) -> None:
    cli(data_dir, "save", "deploy", "Deploys go out with blue-green switching.")
    report = doctor(data_dir)
    assert report["backend"] == "sqlite"
    assert Path(report["location"]) == data_dir / "memory.db"
    assert report["migrations"]["pending"] == []
    assert report["migrations"]["applied"]
    assert report["model"]["loaded"] == E5
    assert report["model"]["dimension"] == 384
    assert report["model"]["stored_model"] == E5
    assert report["embedding_coverage"] == {"observations": 1, "embedded": 1, "missing": 0}
    assert report["ok"] is True and report["warnings"] == []

    text = cli(data_dir, "doctor").stdout
    assert "0 pending" in text and E5 in text and "1/1 observations embedded" in text


def test_without_model_then_reembed(data_dir: Path) -> None:
    texts = ["Deploys go out with blue-green switching behind the load balancer.",
             "Nightly backups of PostgreSQL are kept for 30 days."]
    for n, text in enumerate(texts):
        saved = cli_json(data_dir, "save", f"topic-{n}", text, model="none")
        assert saved["embedded"] is False

    found = cli_json(data_dir, "search", "blue-green deploys", model="none")
    assert found["degraded"] is True
    assert found["degraded_reason"]
    assert found["results"][0]["c"] == texts[0]  # lexical search still works

    proc = cli(data_dir, "doctor", model="none", check=1)
    assert "WARNING" in proc.stdout and "no embedding" in proc.stdout and "reembed" in proc.stdout
    report = doctor(data_dir, model="none", expect=1)
    assert report["model"]["loaded"] is None and report["model"]["reason"]
    assert report["embedding_coverage"] == {"observations": 2, "embedded": 0, "missing": 2}
    # with the model loaded but rows unembedded, doctor still complains
    assert doctor(data_dir, expect=1)["embedding_coverage"]["missing"] == 2

    result = cli_json(data_dir, "reembed")
    assert result["updated"] == 2 and result["model"] == E5 and result["dim"] == 384

    report = doctor(data_dir)
    assert report["embedding_coverage"] == {"observations": 2, "embedded": 2, "missing": 0}
    assert report["ok"] is True
    found = cli_json(data_dir, "search", "how long are database backups retained")
    assert "degraded" not in found
    assert found["results"][0]["c"] == texts[1]
    assert cli_json(data_dir, "reembed")["updated"] == 0  # nothing left to do


def test_model_mismatch_is_refused(data_dir: Path) -> None:
    cli(data_dir, "save", "deploy", "Deploys go out with blue-green switching.")

    proc = cli(data_dir, "search", "x", model="minilm", check=2)
    assert E5 in proc.stderr and MINILM in proc.stderr
    assert proc.stdout == ""

    # the stdio MCP server refuses to start, with the reason on stderr (stdin closed)
    proc = cli(data_dir, model="minilm", check=None)
    assert proc.returncode != 0
    assert E5 in proc.stderr and MINILM in proc.stderr
    assert proc.stdout == ""  # nothing on the protocol stream

    # the data is untouched: the right model still finds it
    found = cli_json(data_dir, "search", "blue-green")
    assert found["results"] and not found.get("degraded")
