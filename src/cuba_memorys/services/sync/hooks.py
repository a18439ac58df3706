"""`cuba-memorys hook install | uninstall`: the git hooks that keep the sync bundle and the
store in step (original-0.27.md §4e "Git hooks"), and the merge driver's registration.

**Hooks.** A marked block (MARKER … END_MARKER) is appended to post-commit, post-checkout,
post-merge and post-rewrite in ``core.hooksPath`` (relative to the work tree's top) or the
repository's hooks folder (``git rev-parse --git-path hooks``, so a linked worktree finds the
shared one). A missing hook file is created with ``#!/bin/sh``; the user's own lines are kept;
installing again replaces only our blocks, byte for byte the same when nothing changed.

- post-commit: ``sync import --conflict merge --if-pending`` first, whenever the folder holds a
  bundle not imported here (another node's: a merge commit, but also ``git reset --hard``, a
  cherry-pick or ``git checkout REF -- <folder>``, which run no import hook; an up-to-date
  folder is decided without loading the model), then ``sync export --scope all
  --unless-pending`` (nothing while an import of the bundle on disk was refused: what the wipe
  guard refused stays in the work tree for ``sync import --confirm``, not overwritten by this
  machine's rows; ``sync status`` names the way out) (and, with ``--with-codegraph``,
  ``codegraph build`` of the repository and ``anchors check --record --quiet``, whose failure
  is ignored: both in the background, so a commit never waits for a build; their output is a
  log section of its own, ``post-commit-codegraph``, ending with ``> codegraph done``).
- post-checkout: import on a branch checkout (``$3`` = 1). post-merge: import.
  post-rewrite: import after ``rebase``, nothing after ``amend``.
- post-commit and post-checkout do nothing while a rebase runs (git runs them for every
  picked commit): an export then would dirty the bundle between two picks and stop the rebase;
  post-rewrite imports the result once at the end.

Each block pins what was resolved at install time: the program (absolute path) and the sync
folder. A folder inside the work tree is pinned as its path relative to the top of the work
tree *the hook runs in*, so every linked worktree exports into its own copy of the folder (an
absolute path would make a commit in one worktree rewrite another's files); a folder outside
the repository is pinned as an absolute path. The store: ``git config --local
cuba-memorys.database-url``, else ``$DATABASE_URL``, else the embedded SQLite store; a
``CUBA_DATA_DIR`` set when the hook runs wins, else the one set at install time (if one was),
because git GUIs and editors run hooks without the shell's variables and the hooks must not
silently write to another store. A database URL is never written into a hook file (it may
hold a password; ``git config`` is where it is pinned).

Hooks never stop git: everything runs in a subshell whose output goes to
``<git dir>/cuba-memorys-hooks.log`` (cut to its last 256 KiB past 1 MiB), failures ignored. A
refused import (the wipe guard's ``error: the bundle would delete …``) is written there, and
``sync import`` keeps it for ``sync status`` (``last_refused_import``). It also writes one line
(:func:`notice`) to git's own stderr, which the block keeps open as fd 3 (``--notice-fd 3``):
otherwise the person running `git pull` would not know the memory was left behind. So do an
export held back by that refusal and one refused by the export's own wipe guard.

**Merge driver.** ``merge.cuba-memorys.{name,driver}`` in the local config and one line
``<folder relative to the top>/** merge=cuba-memorys`` in the top's ``.gitattributes`` (C-quoted
when the path has whitespace or ``"``; older cuba-memorys lines removed, the user's kept). A
folder outside the repository gets no driver, and the answer says why.

``uninstall`` removes exactly these pieces. Nothing here opens the store.

(No ``from __future__ import annotations``: the answer TypedDicts' ``NotRequired`` must be
evaluated, see services/answers.py.)
"""

import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import NotRequired, TypedDict

from cuba_memorys.errors import InvalidInput, NotFound
from cuba_memorys.services import validate
from cuba_memorys.services.sync.export import default_dir

MARKER = "# cuba-memorys hook — installed by `cuba-memorys hook install`"
END_MARKER = "# end of cuba-memorys hook"
HOOKS = ("post-commit", "post-checkout", "post-merge", "post-rewrite")
SHEBANG = "#!/bin/sh"
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"}
DRIVER = "cuba-memorys"
DRIVER_NAME = "cuba-memorys structural merge (three-way, by id)"
DRIVER_KEYS = (f"merge.{DRIVER}.name", f"merge.{DRIVER}.driver")
ATTRIBUTE = f"merge={DRIVER}"
ATTRIBUTES = ".gitattributes"
LOG_NAME = "cuba-memorys-hooks.log"
LOG_MAX_BYTES = 1024 * 1024
LOG_KEEP_BYTES = 256 * 1024
DATABASE_URL_KEY = "cuba-memorys.database-url"
GIT_TIMEOUT = 10.0
# Inside a block, fd 3 is git's own stderr (the rest goes to the log): a refused import or
# export writes its one line there (``--notice-fd``), so whoever ran `git pull` sees it.
NOTICE_FD = 3
NOTICE = f" --notice-fd {NOTICE_FD}"
# Each command is announced first, so the log says what ran (and tests can tell).
IMPORT = f'echo "> sync import --conflict merge"; "$cmh_exe" sync import --conflict merge{NOTICE}'
# post-commit: the folder may hold another node's bundle no hook imported (`git reset --hard`,
# a cherry-pick, `git checkout REF -- folder`): imported before the export, which would drop it
IMPORT_PENDING = ('echo "> sync import --conflict merge --if-pending";'
                  f' "$cmh_exe" sync import --conflict merge --if-pending{NOTICE}')
# ...and the export runs only when that import succeeded (or had nothing to do): an import that
# failed in a way no refusal records (the store locked, the process killed, a bug) must not be
# followed by an export over the bundle still waiting; the next commit tries again
IMPORT_FAILED = ("the import above failed: nothing exported, so the bundle waiting in the folder stays"
                 " (the next commit tries again; see `cuba-memorys sync status`)")
# --unless-pending: a bundle whose import was refused (the wipe guard) is not overwritten
EXPORT = ('echo "> sync export --scope all --unless-pending";'
          f' "$cmh_exe" sync export --scope all --unless-pending{NOTICE}')
CODEGRAPH = 'echo "> codegraph build"; "$cmh_exe" codegraph build --path "$cmh_top"'
# the codegraph lines run in the background (a cold build of a big checkout takes many seconds,
# a commit should never wait for it), in a log section of their own that ends with this line
CODEGRAPH_DONE = "> codegraph done"
# after the codegraph: re-check the code anchors against the new commit (issue 19); `|| true`
# so an older program without the `anchors` verb, or a failing check, changes nothing
ANCHORS = 'echo "> anchors check --record --quiet"; "$cmh_exe" anchors check --record --quiet || true'


class HookWritten(TypedDict):
    hook: str
    path: str
    created: bool  # the file did not exist (made with #!/bin/sh)
    replaced: bool  # an earlier cuba-memorys block was replaced
    made_executable: bool  # the file was there but not executable (so git ignored it): now its lines run too


class MergeDriver(TypedDict):
    installed: bool
    attributes_file: str
    line: str | None  # the .gitattributes line written
    driver: str | None  # merge.cuba-memorys.driver
    reason: NotRequired[str]  # why no driver was installed


class HooksInstalled(TypedDict):
    action: str
    repository: str
    hooks_dir: str
    sync_dir: str
    sync_dir_in_hooks: str  # the shell expression the blocks pin
    executable: str
    hooks: list[HookWritten]
    merge_driver: MergeDriver
    store: str  # where the hooks will read and write memory
    data_dir_pinned: str | None
    codegraph: bool
    codegraph_project: str | None  # pinned with --project at install time (None: the folder's name)
    log: str
    notes: list[str]


class HookRemoved(TypedDict):
    hook: str
    path: str
    block_removed: bool
    file_removed: bool  # nothing but "#!/bin/sh" was left


class HooksUninstalled(TypedDict):
    action: str
    repository: str
    hooks: list[HookRemoved]
    config_removed: list[str]
    attributes_removed: list[str]  # the .gitattributes lines removed
    attributes_file_removed: bool


# -- git -----------------------------------------------------------------------------------
def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT,
                              check=False)
    except FileNotFoundError:
        raise NotFound("git is not installed (or not on PATH)", hint="Install git, then run this again.") from None
    except subprocess.TimeoutExpired:
        raise NotFound(f"`git {' '.join(args)}` did not answer in {GIT_TIMEOUT:.0f} s") from None


def _git_out(args: list[str], cwd: Path) -> str | None:
    done = _git(args, cwd)
    out = done.stdout.rstrip("\n")
    return out if done.returncode == 0 else None


def repository(start: Path) -> Path:
    """The top of the git work tree holding ``start``; a clear error outside one."""
    top = _git_out(["rev-parse", "--show-toplevel"], start)
    if not top:
        raise NotFound(f"{start} is not inside a git work tree, so there is nowhere to install hooks.",
                       hint="Run `cuba-memorys hook install` from inside the repository (`git init` first"
                            " for a new one; a bare repository has no work tree to sync).")
    return Path(top)


def hooks_dir(top: Path) -> Path:
    """``core.hooksPath`` (relative to the work tree's top, as git runs hooks there), else the
    repository's hooks folder, which linked worktrees share."""
    configured = _git_out(["config", "--get", "core.hooksPath"], top)
    if configured:
        return (top / Path(configured).expanduser()).absolute()
    found = _git_out(["rev-parse", "--git-path", "hooks"], top) or ".git/hooks"
    return (top / found).absolute()


def _set_config(top: Path, key: str, value: str) -> None:
    done = _git(["config", "--local", key, value], top)
    if done.returncode != 0:
        raise NotFound(f"could not write {key} into the repository's config: {done.stderr.strip()}")


# -- the sync folder -------------------------------------------------------------------------
def sync_folder(top: Path, given: str | None, configured: Path | None) -> Path:
    """``given`` (--dir), else ``configured`` (CUBA_SYNC_DIR), else .cuba-memorys/ (or an existing
    .memory-industry/ alone); a relative one against the work tree's top, as export resolves it
    (services/sync/export.py sync_dir)."""
    if given is not None:
        validate.text("dir", given, high=4096)
    raw = Path(given).expanduser() if given else configured
    if raw is None:
        return default_dir(top)
    return raw if raw.is_absolute() else top / raw


def _relative(top: Path, folder: Path) -> str | None:
    """``folder`` relative to ``top`` (symbolic links followed), or None when it is outside."""
    base, target = top.resolve(), folder.resolve()
    if target == base or base not in target.parents:
        return None
    return target.relative_to(base).as_posix()


# -- hook blocks -----------------------------------------------------------------------------
def _codegraph_lines(project: str | None) -> list[str]:
    pinned = f" --project {shlex.quote(project)}" if project else ""
    return ["  (",
            '    echo "== post-commit-codegraph $(date -u +%Y-%m-%dT%H:%M:%SZ)"',
            f"    {CODEGRAPH}{pinned}",
            f"    {ANCHORS}",
            f'    echo "{CODEGRAPH_DONE}"',
            f'  ) >>"$cmh_log" 2>&1 </dev/null {NOTICE_FD}>&- &']  # (not git's stderr: git would wait for it)


def _body(hook: str, with_codegraph: bool, project: str | None = None) -> list[str]:
    if hook == "post-commit":
        lines = ["if [ -d \"$(git rev-parse --git-path rebase-merge)\" ] ||"
                 " [ -d \"$(git rev-parse --git-path rebase-apply)\" ]; then",
                 "  echo 'a rebase is running: nothing now, post-rewrite imports at its end'",
                 "else",
                 f"  if {IMPORT_PENDING}; then",
                 f"    {EXPORT}",
                 "  else",
                 f"    echo '{IMPORT_FAILED}'",
                 "  fi"]
        if with_codegraph:
            lines += _codegraph_lines(project)
        return [*lines, "fi"]
    if hook == "post-checkout":
        return ["if [ \"${3:-}\" = 1 ] && [ ! -d \"$(git rev-parse --git-path rebase-merge)\" ] &&"
                " [ ! -d \"$(git rev-parse --git-path rebase-apply)\" ]; then",
                f"  {IMPORT}  # a branch checkout, not a file checkout or a rebase's own",
                "fi"]
    if hook == "post-merge":
        return [IMPORT]
    return ["if [ \"${1:-}\" = rebase ]; then", f"  {IMPORT}", "fi  # after an amend: nothing"]


def block(hook: str, executable: Path, sync_expr: str, data_dir: Path | None, with_codegraph: bool,
          project: str | None = None) -> str:
    """The marked block appended to ``hook`` (POSIX sh, in a subshell that cannot fail git)."""
    lines = [MARKER,
             "# (`cuba-memorys hook install` rewrites this block; `cuba-memorys hook uninstall` removes it)",
             "(",
             f"  cmh_exe={shlex.quote(str(executable))}",
             '  cmh_top=$(git rev-parse --show-toplevel) || exit 0',
             f"  CUBA_SYNC_DIR={sync_expr}; export CUBA_SYNC_DIR",
             f"  if cmh_url=$(git config --local --get {DATABASE_URL_KEY}); then"
             " DATABASE_URL=$cmh_url; export DATABASE_URL; fi"]
    if data_dir is not None:
        lines += [f"  cmh_data={shlex.quote(str(data_dir))}  # CUBA_DATA_DIR at install time, unless set now",
                  '  : "${CUBA_DATA_DIR:=$cmh_data}"; export CUBA_DATA_DIR']
    lines += ['  cmh_log="$(git rev-parse --absolute-git-dir)/' + LOG_NAME + '" || exit 0',
              # git's stderr, for a refusal's one line; /dev/null when git runs the hook without one
              f"  if (exec {NOTICE_FD}>&2); then exec {NOTICE_FD}>&2; else exec {NOTICE_FD}>/dev/null; fi",
              f'  if [ -f "$cmh_log" ] && [ "$(wc -c <"$cmh_log")" -gt {LOG_MAX_BYTES} ]; then',
              f'    tail -c {LOG_KEEP_BYTES} "$cmh_log" >"$cmh_log.tmp" && mv "$cmh_log.tmp" "$cmh_log"',
              "  fi",
              "  {",
              f'    echo "== {hook} $(date -u +%Y-%m-%dT%H:%M:%SZ)"',
              *[f"    {line}" for line in _body(hook, with_codegraph, project)],
              '  } >>"$cmh_log" 2>&1 </dev/null',
              ") || :",
              END_MARKER]
    return "\n".join(lines) + "\n"


# -- what a refusal shows on git's terminal -------------------------------------------------
EXPORT_WAY_OUT = ("`cuba-memorys sync import` to take the bundle's rows first, or `cuba-memorys sync export --scope"
                  " all --force` to replace the bundle with this memory as it is")


def notice_reason(reason: str) -> str:
    """Why, from a refusal's message: the part before "; nothing was imported/written" (what
    follows is the way out in the MCP tool's words; the line names the CLI's commands instead)."""
    return reason.split("; nothing was", 1)[0].strip().rstrip(".")


def notice(subject: str, reason: str, way_out: str) -> str:
    """The one line a hook's refused import or export shows on git's stderr (``--notice-fd``):
    what was refused, why and the way out. The hook's log has the whole output; git goes on."""
    return (f"cuba-memorys: {subject}: {notice_reason(reason)}. Way out: {way_out}. (The git command itself went"
            f" on; the whole output is in {LOG_NAME} in the git folder.)")


def strip_blocks(text: str, path: Path) -> tuple[str, bool]:
    """``text`` without our blocks (and the blank lines before them); whether one was found.
    A start marker with no end marker is refused: which lines are ours is then unknown."""
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    found = False
    i = 0
    while i < len(lines):
        if lines[i].rstrip("\r\n") != MARKER:
            kept.append(lines[i])
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip("\r\n") == END_MARKER), None)
        if end is None:
            raise InvalidInput("hook", f"{path} has a cuba-memorys block (line {i + 1}) with no end marker"
                               f" {END_MARKER!r}; nothing was changed",
                               "remove the old block by hand, then run the command again")
        while kept and not kept[-1].strip():
            kept.pop()
        found = True
        i = end + 1
    return "".join(kept), found


def _read(path: Path) -> str:
    """A hook file's text; bytes that are not UTF-8 are kept as they are (written back unchanged)."""
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def _check_shell(text: str, path: Path) -> None:
    """A hook file we append sh lines to must be a shell script."""
    first = text.split("\n", 1)[0]
    if not first.startswith("#!"):
        return
    words = first[2:].split()
    program = Path(words[0]).name if words else ""
    if program == "env" and len(words) > 1:
        program = Path(words[1]).name
    if program not in SHELLS:
        raise InvalidInput("hook", f"{path} is a {program or 'non-shell'} script ({first.strip()!r}); shell lines"
                           " cannot be appended to it, so no hook was changed",
                           "call `cuba-memorys sync import --conflict merge` / `sync export --scope all` from it"
                           " yourself, or make it a #!/bin/sh script")


def _write(path: Path, text: str, mode: int) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, with ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as out:
            out.write(text)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _executable_mode(mode: int) -> int:
    """``mode`` plus execute wherever it has read (what `chmod +x` does under a 022 umask)."""
    return (mode & 0o7777) | ((mode & 0o444) >> 2) | 0o100


def _hook_target(path: Path) -> Path:
    return path.resolve() if path.is_symlink() else path  # a linked hook (a hook manager's) is edited in place


def _install_hook(path: Path, text_block: str) -> HookWritten:
    target = _hook_target(path)
    existing = _read(target) if target.is_file() else None
    hook = path.name
    if existing is None or not existing.strip():
        _write(target, f"{SHEBANG}\n\n{text_block}", 0o755)
        return {"hook": hook, "path": str(path), "created": existing is None, "replaced": False,
                "made_executable": False}
    _check_shell(existing, path)
    rest, replaced = strip_blocks(existing, path)
    rest = rest.rstrip("\n") + "\n"
    mode = target.stat().st_mode
    _write(target, f"{rest}\n{text_block}", _executable_mode(mode))
    return {"hook": hook, "path": str(path), "created": False, "replaced": replaced,
            "made_executable": not mode & 0o100}


# -- .gitattributes ------------------------------------------------------------------------
def attributes_pattern(relative: str) -> str:
    """``<relative>/**`` as a .gitattributes pattern: glob characters escaped, C-quoted when the
    path has whitespace or a double quote (gitattributes(5))."""
    escaped = re.sub(r"([*?\[\\])", r"\\\1", relative) + "/**"
    if not re.search(r'[\s"]', escaped):
        return escaped
    quoted = escaped.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t").replace("\n", "\\n")
    return f'"{quoted}"'


def _is_ours(line: str) -> bool:
    return ATTRIBUTE in line.split()


def _strip_attributes(top: Path) -> tuple[list[str], list[str]]:
    """(the user's lines, our lines) of the top's .gitattributes."""
    path = top / ATTRIBUTES
    lines = _read(path).splitlines() if path.is_file() else []
    return [x for x in lines if not _is_ours(x)], [x for x in lines if _is_ours(x)]


def _driver_command(executable: Path) -> str:
    exe = str(executable)
    shown = f'"{exe}"' if not re.search(r'["$`\\]', exe) else shlex.quote(exe)
    return f"{shown} hook merge-driver %O %A %B %P"


def _unset_driver(top: Path) -> list[str]:
    removed = []
    for key in DRIVER_KEYS:
        if _git_out(["config", "--local", "--get", key], top) is not None:
            _git(["config", "--local", "--unset-all", key], top)
            removed.append(key)
    if removed and _git_out(["config", "--local", "--get-regexp", rf"^merge\.{DRIVER}\."], top) is None:
        _git(["config", "--local", "--remove-section", f"merge.{DRIVER}"], top)  # no empty [merge "…"] left
    return removed


def _install_driver(top: Path, relative: str | None, executable: Path) -> MergeDriver:
    path = top / ATTRIBUTES
    kept, removed = _strip_attributes(top)
    if relative is None:  # no driver for files git does not hold; stale pieces go
        if removed:
            _write_attributes(path, kept)
        _unset_driver(top)
        return {"installed": False, "attributes_file": str(path), "line": None, "driver": None,
                "reason": "the sync directory is outside the repository (or is its top), so git never merges"
                          " its files: no merge driver was installed"}
    line = f"{attributes_pattern(relative)} {ATTRIBUTE}"
    _write_attributes(path, [*kept, line])
    command = _driver_command(executable)
    _set_config(top, DRIVER_KEYS[0], DRIVER_NAME)
    _set_config(top, DRIVER_KEYS[1], command)
    return {"installed": True, "attributes_file": str(path), "line": line, "driver": command}


def _write_attributes(path: Path, lines: list[str]) -> None:
    mode = path.stat().st_mode & 0o7777 if path.is_file() else 0o644
    _write(path, "".join(f"{x}\n" for x in lines), mode)


# -- install / uninstall ---------------------------------------------------------------------
def _store(top: Path, database_url_set: bool, data_dir: Path | None) -> tuple[str, list[str]]:
    """Where the hooks' store will be, in words, and what the user should know about it."""
    if _git_out(["config", "--local", "--get", DATABASE_URL_KEY], top):
        return f"PostgreSQL at `git config {DATABASE_URL_KEY}`", []
    if database_url_set:
        return ("PostgreSQL at $DATABASE_URL as set when the hook runs (the embedded store where it is not set)",
                [f"DATABASE_URL is not pinned: git run from a GUI or editor may not see it. To pin it:"
                 f" git config --local {DATABASE_URL_KEY} <url>"])
    where = f"CUBA_DATA_DIR, else {data_dir}" if data_dir else "CUBA_DATA_DIR, else the default data folder"
    return f"the embedded SQLite store ({where})", []


def install(start: Path, executable: Path, dir: str | None = None, configured_dir: Path | None = None,
            data_dir: Path | None = None, database_url_set: bool = False,
            with_codegraph: bool = False, project: str | None = None) -> HooksInstalled:
    """Install (or reinstall) the hook blocks and the merge driver of the repository holding
    ``start``. ``executable``: the cuba-memorys program the hooks run; ``configured_dir``:
    CUBA_SYNC_DIR; ``data_dir``: CUBA_DATA_DIR as set now (None: not set); ``project``: the
    project the post-commit codegraph build writes into (None: the build's default, the
    repository folder's name)."""
    top = repository(start)
    if project is not None:
        project = validate.name("--project", project).strip()
    folder = sync_folder(top, dir, configured_dir)
    relative = _relative(top, folder)
    sync_expr = f'"$cmh_top"/{shlex.quote(relative)}' if relative else shlex.quote(str(folder.absolute()))
    where = hooks_dir(top)
    blocks = {hook: block(hook, executable, sync_expr, data_dir, with_codegraph, project) for hook in HOOKS}
    for hook in HOOKS:  # check every file first: either all four hooks are written or none
        target = _hook_target(where / hook)
        if target.is_file():
            text = _read(target)
            _check_shell(text, where / hook)
            strip_blocks(text, where / hook)
    written = [_install_hook(where / hook, blocks[hook]) for hook in HOOKS]
    driver = _install_driver(top, relative, executable)
    store, notes = _store(top, database_url_set, data_dir)
    if not driver["installed"]:
        notes.append(driver["reason"])
    notes += [f"{row['path']} was not executable, so git ignored it; it is now, and its own lines run too"
              for row in written if row["made_executable"]]
    git_dir = _git_out(["rev-parse", "--absolute-git-dir"], top) or str(top / ".git")
    return {"action": "install", "repository": str(top), "hooks_dir": str(where), "sync_dir": str(folder),
            "sync_dir_in_hooks": sync_expr, "executable": str(executable), "hooks": written,
            "merge_driver": driver, "store": store, "data_dir_pinned": str(data_dir) if data_dir else None,
            "codegraph": with_codegraph, "codegraph_project": project if with_codegraph else None,
            "log": str(Path(git_dir) / LOG_NAME), "notes": notes}


def _uninstall_hook(path: Path) -> HookRemoved:
    target = _hook_target(path)
    result: HookRemoved = {"hook": path.name, "path": str(path), "block_removed": False, "file_removed": False}
    if not target.is_file():
        return result
    rest, found = strip_blocks(_read(target), path)
    if not found:
        return result
    result["block_removed"] = True
    if rest.strip() in ("", SHEBANG):  # only what install put there
        target.unlink()
        result["file_removed"] = True
    else:
        _write(target, rest.rstrip("\n") + "\n", target.stat().st_mode & 0o7777)
    return result


def uninstall(start: Path) -> HooksUninstalled:
    """Remove exactly what install wrote: our hook blocks (and hook files left with nothing else),
    the merge driver's config keys and our .gitattributes line (and the file when it is left empty)."""
    top = repository(start)
    folders = [hooks_dir(top)]
    default = (top / (_git_out(["rev-parse", "--git-path", "hooks"], top) or ".git/hooks")).absolute()
    if default not in folders:  # core.hooksPath may have changed since the install
        folders.append(default)
    for folder in folders:  # check first: a broken block anywhere changes nothing
        for hook in HOOKS:
            target = _hook_target(folder / hook)
            if target.is_file():
                strip_blocks(_read(target), folder / hook)
    removed = [r for folder in folders for r in (_uninstall_hook(folder / hook) for hook in HOOKS)
               if r["block_removed"] or folder == folders[0]]
    config = _unset_driver(top)
    kept, lines = _strip_attributes(top)
    file_removed = False
    if lines:
        path = top / ATTRIBUTES
        if any(x.strip() for x in kept):
            _write_attributes(path, kept)
        else:
            path.unlink()
            file_removed = True
    return {"action": "uninstall", "repository": str(top), "hooks": removed, "config_removed": config,
            "attributes_removed": lines, "attributes_file_removed": file_removed}
