"""What a newcomer met in the first hour (issue 30, items 13 and 14), through the real program.

- A data folder the store cannot use (a file, a path under a file, a read-only folder), and a
  memory.db that is not a SQLite database or is damaged: every verb and the stdio server say it
  in one `error: …` line (exit 2), and `doctor` diagnoses the file with the ways out, touching
  nothing.
- Ctrl-C on `serve`, early or twice while serving: one line at most, the store closed.
- Settings: a misspelt CUBA_EMBED_MODEL refuses to start; `serve PORT` / `serve notaport`;
  DATABASE_URL=sqlite:///… read as an absolute path; `setup --env CUBA_DATA_DIR` on a fresh
  machine, as the README writes it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import SERVER_BIN, StoreLocation
from test_http import call, free_port, make_server, mcp_session, run  # noqa: F401 - make_server is a fixture

README = Path(__file__).resolve().parents[1] / "README.md"
FAST = {"CUBA_EMBED_MODEL": "none"}  # nothing here needs vectors; each program starts faster


def env_for(data_dir: Path, **extra: str) -> dict[str, str]:
    return StoreLocation("sqlite", data_dir).env(**{**FAST, **extra})


def cuba(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 120,
         ) -> subprocess.CompletedProcess:
    return subprocess.run([str(SERVER_BIN), *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess, what: str) -> str:
    """The single `error: …` line a failed command must print (exit status 2), nothing else."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, f"{what}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr and len(lines) == 1, f"{what}: not one line:\n{proc.stderr[-3000:]}"
    assert lines[0].startswith("error: "), f"{what}: {lines[0]}"
    return lines[0]


# Verbs that open the store, and the stdio server (no verb). serve gets a free port each time.
VERBS = (("search", "deploys"), ("save", "billing", "uses stripe"), ("recall",), ("reembed",), ("doctor",),
         ("sync", "export"), ("serve",), ())


def every_verb(env: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, subprocess.CompletedProcess]]:
    for verb in VERBS:
        args = (*verb, f"127.0.0.1:{free_port()}") if verb == ("serve",) else verb
        yield " ".join(verb) or "(stdio server)", cuba(*args, env=env, cwd=tmp_path)


# -- 13 (a): a data folder the store cannot use ------------------------------------------------------
@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder root cannot write either: a read-only bind mount of itself (a chmod would not
    stop root), holding a store made before it turned read-only."""
    folder = tmp_path / "read-only"
    made = cuba("save", "billing", "uses stripe", env=env_for(folder))
    assert made.returncode == 0, made.stderr
    if os.geteuid() != 0:
        folder.chmod(0o555)
    else:
        bound = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)],
                               capture_output=True, text=True)
        if bound.returncode != 0:
            pytest.skip(f"root cannot be kept from writing a folder here (mount --bind -o ro: {bound.stderr.strip()})")
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True)
    try:
        with pytest.raises(OSError):
            (folder / "probe").touch()
        yield folder
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(folder)], capture_output=True)
        else:
            folder.chmod(0o755)


def test_a_data_dir_that_is_a_file_is_one_line_for_every_verb(tmp_path: Path) -> None:
    blocker = tmp_path / "memory-here"
    blocker.write_text("a file, not a folder")
    for verb, proc in every_verb(env_for(blocker), tmp_path):
        line = one_error_line(proc, verb)
        assert f"CUBA_DATA_DIR points at {blocker}, which is a file, not a folder" in line, (verb, line)
        assert "Point CUBA_DATA_DIR at a folder you can write" in line
    assert blocker.read_text() == "a file, not a folder"


def test_a_data_dir_under_a_file_is_one_line_for_every_verb(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for verb, proc in every_verb(env_for(blocker / "data" / "deeper"), tmp_path):
        line = one_error_line(proc, verb)
        assert f"{blocker} on its way is a file, not a folder" in line, (verb, line)


def test_a_read_only_data_dir_is_one_line_for_every_verb(read_only_folder: Path, tmp_path: Path) -> None:
    for verb, proc in every_verb(env_for(read_only_folder), tmp_path):
        line = one_error_line(proc, verb)
        assert f"the data folder {read_only_folder} (CUBA_DATA_DIR) is read-only" in line, (verb, line)
    below = cuba("search", "x", env=env_for(read_only_folder / "new"))  # a folder it would have to create
    assert f"cannot create the data folder {read_only_folder / 'new'}" in one_error_line(below, "search")


# -- 13 (b): a memory.db that is not a SQLite database, or is damaged -----------------------------------
@pytest.fixture(scope="module")
def store_bytes(tmp_path_factory) -> bytes:
    """A real store's file (one observation), closed: its WAL merged into it."""
    folder = tmp_path_factory.mktemp("made")
    made = cuba("save", "billing", "The billing service retries webhooks", env=env_for(folder))
    assert made.returncode == 0, made.stderr
    return (folder / "memory.db").read_bytes()


def store_with(tmp_path: Path, content: bytes, wal: bytes | None = None) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "memory.db").write_bytes(content)
    if wal is not None:
        (folder / "memory.db-wal").write_bytes(wal)
    return folder


def damaged_table(content: bytes, table: str) -> bytes:
    """The file with the root page of ``table`` overwritten: it opens, and reading that table fails."""
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"cuba-probe-{os.getpid()}.db"
    probe.write_bytes(content)
    try:
        with sqlite3.connect(probe) as conn:
            page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.close()
    finally:
        probe.unlink()
    start = (page - 1) * size
    return content[:start] + bytes(range(256)) * (size // 256) + content[start + size:]


def assert_ways_out(steps: list[str], wal: bool) -> None:
    """The ways out, in order: the -wal beside it (when there is one), a backup, .recover."""
    text = " | ".join(steps)
    backup, recover = text.index("sync import"), text.index('".recover"')
    assert backup < recover and "undo" in text[:recover]
    assert ("-wal" in steps[0]) is wal
    assert "never deletes" in steps[-1]


CORRUPTIONS = {
    "random bytes": (lambda good: os.urandom(20_000), "is not a SQLite database", "not_sqlite"),
    "truncated": (lambda good: good[:5_000], "is damaged", "damaged"),
    "half of it": (lambda good: good[: len(good) // 2], "is damaged", "damaged"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_an_unreadable_store_is_one_line_for_every_verb_and_left_alone(case: str, store_bytes: bytes,
                                                                        tmp_path: Path) -> None:
    make, says, kind = CORRUPTIONS[case]
    content = make(store_bytes)
    folder = store_with(tmp_path, content)
    for verb, proc in every_verb(env_for(folder), tmp_path):
        if verb == "doctor":
            continue  # it diagnoses instead: the next test
        line = one_error_line(proc, verb)
        assert f"the memory database {folder / 'memory.db'} {says}" in line, (verb, line)
        assert "Nothing was changed or deleted" in line and "sync import" in line and ".recover" in line
    assert (folder / "memory.db").read_bytes() == content  # never rewritten, never deleted
    assert sorted(p.name for p in folder.iterdir()) == ["memory.db"]  # nothing added beside it either


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_doctor_diagnoses_an_unreadable_store(case: str, store_bytes: bytes, tmp_path: Path) -> None:
    make, says, kind = CORRUPTIONS[case]
    content = make(store_bytes)
    wal = b"\x37\x7f\x06\x82" + os.urandom(4_000) if kind == "not_sqlite" else None  # a WAL left beside it
    folder = store_with(tmp_path, content, wal)
    env = env_for(folder)
    report_run = cuba("doctor", "--json", env=env, cwd=tmp_path)
    assert report_run.returncode == 1 and "Traceback" not in report_run.stderr, report_run.stderr[-3000:]
    report = json.loads(report_run.stdout)
    assert report["readable"] is False and report["problem"] == kind and report["ok"] is False
    assert report["location"] == str(folder / "memory.db") and report["wal_beside"] is (wal is not None)
    assert_ways_out(report["ways_out"], wal=wal is not None)
    assert report["backups"]["undo_dir"] == str(folder / "undo")
    text = cuba("doctor", env=env, cwd=tmp_path)
    assert text.returncode == 1 and "Traceback" not in text.stderr, text.stderr[-3000:]
    assert f"store:      sqlite at {folder / 'memory.db'}: UNREADABLE" in text.stdout and says in text.stdout
    numbered = re.findall(r"^  (\d)\. ", text.stdout, flags=re.M)
    assert numbered == [str(n) for n in range(1, len(report["ways_out"]) + 1)]
    assert (folder / "memory.db").read_bytes() == content
    assert wal is None or (folder / "memory.db-wal").read_bytes() == wal


def test_a_store_damaged_inside_says_so_when_read_and_doctor_finds_it(store_bytes: bytes, tmp_path: Path) -> None:
    """A damaged page the opening does not read: the verb that reads it says so in one line,
    and doctor reads every page (quick_check) to find it."""
    folder = store_with(tmp_path, damaged_table(store_bytes, "observations"))
    env = env_for(folder)
    line = one_error_line(cuba("save", "billing", "another fact", env=env, cwd=tmp_path), "save")
    assert f"the memory database {folder / 'memory.db'} is damaged" in line and ".recover" in line
    report_run = cuba("doctor", "--json", env=env, cwd=tmp_path)
    assert report_run.returncode == 1 and "Traceback" not in report_run.stderr, report_run.stderr[-3000:]
    report = json.loads(report_run.stdout)  # the page is too damaged for quick_check to go on: unreadable
    assert report["readable"] is False and report["problem"] == "damaged"
    assert_ways_out(report["ways_out"], wal=False)


def broken_schema(content: bytes, tmp_path: Path) -> bytes:
    """The file with a table whose row breaks its own NOT NULL: every page reads, and SQLite's
    quick_check reports the row (what doctor lists as problems, the store still opening)."""
    probe = tmp_path / "probe.db"
    probe.write_bytes(content)
    conn = sqlite3.connect(probe, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("CREATE TABLE padding(x)")
    conn.execute("INSERT INTO padding VALUES (NULL)")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = 'CREATE TABLE padding(x NOT NULL)' WHERE name = 'padding'")
    conn.execute("PRAGMA journal_mode = WAL")  # as the store keeps it, so opening it changes no byte
    conn.close()
    return probe.read_bytes()


def test_doctor_reports_what_quick_check_finds(store_bytes: bytes, tmp_path: Path) -> None:
    content = broken_schema(store_bytes, tmp_path)
    folder = store_with(tmp_path, content)
    report_run = cuba("doctor", "--json", env=env_for(folder), cwd=tmp_path)
    assert report_run.returncode == 1 and "Traceback" not in report_run.stderr, report_run.stderr[-3000:]
    report = json.loads(report_run.stdout)
    assert report["file_check"]["problems"] == ["NULL value in padding.x"]
    assert_ways_out(report["file_check"]["ways_out"], wal=False)
    assert report["file_check"]["backups"]["undo_dir"] == str(folder / "undo")
    assert any(w.startswith(f"the memory database {folder / 'memory.db'} is damaged (SQLite's quick_check:"
                            " NULL value in padding.x)") for w in report["warnings"])
    assert (folder / "memory.db").read_bytes() == content


def test_doctor_on_a_sound_store_checks_the_file_and_finds_nothing(store_bytes: bytes, tmp_path: Path) -> None:
    folder = store_with(tmp_path, store_bytes)
    report = json.loads(cuba("doctor", "--json", env=env_for(folder), cwd=tmp_path).stdout)
    assert report["file_check"] == {"problems": [], "ways_out": [], "backups": None}


# -- 13 (c): Ctrl-C on serve -------------------------------------------------------------------------
def assert_closed_cleanly(where: StoreLocation) -> None:
    if where.backend == "postgresql":
        import psycopg

        with psycopg.connect(where.database_url) as conn:  # every connection of the server closed
            assert conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND pid <> pg_backend_pid()").fetchone()[0] == 0
        return
    wal = where.data_dir / "memory.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # the last close merged the WAL into memory.db
    if (where.data_dir / "memory.db").exists():
        with sqlite3.connect(where.data_dir / "memory.db") as conn:
            assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        conn.close()


@pytest.mark.parametrize("delay", [0.3, 0.7, 1.1, 1.6])
def test_ctrl_c_while_serve_starts_is_quiet(delay: float, tmp_path: Path) -> None:
    where = StoreLocation("sqlite", tmp_path / "data")
    proc = subprocess.Popen([str(SERVER_BIN), "serve", f"127.0.0.1:{free_port()}"], env=where.env(**FAST),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    said = [line for line in err.splitlines() if not line.startswith("cuba-memorys: serving MCP at")]
    assert "Traceback" not in err and len(said) <= 1, f"after {delay} s:\n{err[-3000:]}"
    assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, err)
    assert_closed_cleanly(where)


def test_ctrl_c_twice_while_serving_is_quiet_and_closes_the_store(make_server) -> None:  # noqa: F811
    server = make_server().start()

    async def write() -> None:
        async with mcp_session(server.url) as session:
            await call(session, "cuba_cronica", {"action": "add", "entity_name": "e", "content": "kept after Ctrl-C"})

    run(write)
    assert httpx.get(server.base + "/health", timeout=10).status_code == 200
    started = len(server.log().splitlines())
    server.proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    server.proc.send_signal(signal.SIGINT)
    code = server.proc.wait(timeout=30)
    said = server.log().splitlines()[started:]
    assert "Traceback" not in server.log() and len(said) <= 1, "\n".join(said[-40:])
    assert code in (0, -signal.SIGINT), (code, said)
    assert_closed_cleanly(server.where)
    if server.where.backend == "sqlite":
        with sqlite3.connect(server.data_dir / "memory.db") as conn:
            assert conn.execute("SELECT content FROM observations").fetchall() == [("kept after Ctrl-C",)]
        conn.close()


# -- 14 (a): CUBA_EMBED_MODEL ------------------------------------------------------------------------
def test_a_misspelt_embedding_model_refuses_to_start(tmp_path: Path) -> None:
    env = env_for(tmp_path / "data", CUBA_EMBED_MODEL="multilingual-e5-smal")
    for verb, proc in every_verb(env, tmp_path):
        line = one_error_line(proc, verb)
        assert "CUBA_EMBED_MODEL='multilingual-e5-smal' is not an embedding model" in line, (verb, line)
        assert "did you mean multilingual-e5-small?" in line
        assert "multilingual-e5-small, all-MiniLM-L6-v2, none" in line and "keywords only" in line
    assert not (tmp_path / "data").exists()  # refused before anything was made


@pytest.mark.parametrize("name", ["none", "NONE", "e5", "MiniLM", "all-MiniLM-L6-v2"])
def test_every_accepted_embedding_model_name_starts(name: str, tmp_path: Path) -> None:
    proc = cuba("recall", "--json", env=env_for(tmp_path / "data", CUBA_EMBED_MODEL=name), cwd=tmp_path)
    assert proc.returncode == 0 and "error" not in proc.stderr, proc.stderr[-2000:]


# -- 14 (b): serve's address -------------------------------------------------------------------------
def test_serve_with_a_port_alone_serves_it_on_loopback(tmp_path: Path) -> None:
    where, port = StoreLocation("sqlite", tmp_path / "data"), free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(SERVER_BIN), "serve", str(port)], env=where.env(**FAST),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail(f"serve {port} did not answer:\n{log.read_text()}")
        assert health.status_code == 200 and f"serving MCP at http://127.0.0.1:{port}/mcp" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("addr", ["notaport", "localhost", "127.0.0.1:http", "::1"])
def test_serve_with_something_not_an_address_says_so(addr: str, tmp_path: Path) -> None:
    line = one_error_line(cuba("serve", addr, env=env_for(tmp_path / "data")), f"serve {addr}")
    assert line.startswith(f"error: invalid address {addr!r}") and "beyond loopback" not in line
    assert "HOST:PORT or PORT" in line or "brackets" in line
    assert not (tmp_path / "data").exists()  # refused before any data is touched


def test_a_bad_cuba_http_addr_is_named(tmp_path: Path) -> None:
    line = one_error_line(cuba("serve", env=env_for(tmp_path / "data", CUBA_HTTP_ADDR="notaport")), "serve")
    assert "invalid address 'notaport' (from CUBA_HTTP_ADDR): the address must be HOST:PORT or PORT" in line


# -- 14 (c): DATABASE_URL=sqlite:///… ----------------------------------------------------------------
def sqlite_url_cases(tmp_path: Path) -> list[tuple[str, Path]]:
    """(DATABASE_URL, the file it must name), run from tmp_path/"here"."""
    here = tmp_path / "here"
    absolute = tmp_path / "abs" / "memory.db"
    return [
        ("sqlite:///" + str(absolute).lstrip("/"), absolute),  # the README's form: absolute
        ("sqlite:////" + str(tmp_path / "four" / "m.db").lstrip("/"), tmp_path / "four" / "m.db"),  # SQLAlchemy's
        ("sqlite:///rel.db", here / "rel.db"),  # a bare name: the current folder, as SQLAlchemy reads it
        ("sqlite:///./sub/m.db", here / "sub" / "m.db"),
    ]


def test_sqlite_urls_name_the_file_they_say(tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    for url, expected in sqlite_url_cases(tmp_path):
        env = env_for(tmp_path / "unused-data-dir", DATABASE_URL=url)
        saved = cuba("save", "billing", f"stored through {url}", env=env, cwd=here)
        assert saved.returncode == 0, (url, saved.stderr[-2000:])
        assert expected.is_file(), (url, sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.db")))
        report = json.loads(cuba("doctor", "--json", env=env, cwd=here).stdout)
        assert Path(report["location"]).absolute() == expected.absolute()
    assert not (here / "tmp").exists() and not (tmp_path / "unused-data-dir").exists()


def test_an_sqlite_url_naming_no_file_is_refused(tmp_path: Path) -> None:
    for url in ("sqlite://", "sqlite:///", "sqlite:/memory.db"):
        line = one_error_line(cuba("search", "x", env=env_for(tmp_path / "d", DATABASE_URL=url)), url)
        assert f"DATABASE_URL={url!r} names no file" in line


def test_the_readme_says_how_sqlite_urls_are_read() -> None:
    row = next(line for line in README.read_text().splitlines() if line.startswith("| `DATABASE_URL`"))
    assert "sqlite:///abs/path/memory.db" in row and "sqlite:////abs/path/memory.db" in row
    assert "relative to the current folder" in row


# -- 14 (d): setup --env CUBA_DATA_DIR on a fresh machine --------------------------------------------
def fresh_machine(home: Path) -> dict[str, str]:
    """A user's environment with none of our settings, nor an XDG data folder of its own."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CUBA_", "XDG_")) and k != "DATABASE_URL"}
    return {**base, "HOME": str(home), **FAST}


def test_the_readmes_generic_setup_works_on_a_fresh_machine(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    line = next(line for line in README.read_text().splitlines() if "setup --client generic" in line)
    command = shlex.split(line.split("#")[0])
    assert command[0] == ".venv/bin/cuba-memorys" and "--env" in command
    args = [str(home) + arg[1:] if arg.startswith("~/") else arg for arg in command[1:]]
    env = fresh_machine(home)
    made = cuba(*args, env=env, cwd=home)
    assert made.returncode == 0, made.stderr
    config = home / ".cursor" / "mcp.json"
    entry = json.loads(config.read_text())["mcpServers"]["cuba-memorys"]
    written = entry["env"]["CUBA_DATA_DIR"]
    default = home / ".local" / "share" / "cuba-memorys"
    assert written == str(default)
    assert f"CUBA_DATA_DIR is not set here: the entry gets the folder the server would use without it, {default}" \
        in made.stdout + made.stderr
    # the folder written is the one the server uses without it
    report = json.loads(cuba("doctor", "--json", env=env, cwd=home).stdout)
    assert report["location"] == str(default / "memory.db")
    again = cuba(*args, env=env, cwd=home)
    assert again.returncode == 0 and "nothing written" in again.stdout  # the same entry: unchanged


def test_setup_env_of_an_unset_name_without_a_default_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    proc = cuba("setup", "--client", "generic", "--config", str(home / "mcp.json"), "--env", "CUBA_HTTP_TOKEN",
                env=fresh_machine(home), cwd=home)
    assert "CUBA_HTTP_TOKEN is not set in this environment" in one_error_line(proc, "setup")
    assert not (home / "mcp.json").exists()
