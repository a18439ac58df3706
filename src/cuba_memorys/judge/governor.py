"""The resource plan: which models fit in this machine's (or container's) memory.

Budget = min(cgroup memory limit, MemAvailable) − 768 MiB kept for the store, the vector index
and the Python process. Models are planned in order of value — embedder (vector search), then
reranker, then NLI — each one that fits in what is left. A model the user configured
explicitly (CUBA_RERANKER_PATH, CUBA_NLI_PATH, a non-default CUBA_EMBED_MODEL) is planned
regardless: the plan reports, it never overrides a choice the user made.

The roots (/proc, /sys/fs/cgroup) are parameters so tests can point them at a fake tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cuba_memorys.config import Settings
from cuba_memorys.judge.late_interaction import NAME as LATE_INTERACTION

MIB = 1024 * 1024
RESERVE_BYTES = 768 * MIB
# onnxruntime's working memory on top of the weights, measured on cross-encoders: ~1.3×.
ONNX_OVERHEAD = 1.3
# Measured peak RSS growth (VmHWM) loading each embedder and embedding 64 passages of 400 words
# in batches of 32 (2026-11-30, Python 3.11): e5-small 4-bit 317 MiB, MiniLM int8 + onnxruntime 143 MiB.
EMBEDDER_RESIDENT = {"multilingual-e5-small": 350 * MIB, "all-MiniLM-L6-v2": 160 * MIB}
# Models whose resident size is not their weights': the late-interaction reranker keeps MiniLM plus
# an LRU of passage token vectors (measured: +168 MiB loaded, ~207 MiB after 120 LoCoMo questions).
MEASURED_RESIDENT = {LATE_INTERACTION: 220 * MIB}
# Limits at or above this are the kernels' "unlimited" (cgroup v1 writes 2^63 rounded to pages).
UNLIMITED = 1 << 60
WEIGHT_SUFFIXES = (".onnx", ".onnx_data", ".onnx.data", ".data")
ORDER = ("embedder", "reranker", "nli")


# -- memory ------------------------------------------------------------------------------------

def _read_limit(file: Path) -> int | None:
    """A cgroup limit file's value in bytes; None for "max", absent or unreadable."""
    try:
        raw = file.read_text().strip()
    except OSError:
        return None
    if not raw.isdigit() or int(raw) >= UNLIMITED:
        return None
    return int(raw)


def _walk_up(start: Path, root: Path) -> list[Path]:
    """``start`` and its parents up to and including ``root``."""
    dirs = [start]
    while dirs[-1] != root and root in dirs[-1].parents:
        dirs.append(dirs[-1].parent)
    if dirs[-1] != root:
        dirs.append(root)
    return dirs


def _cgroup_paths(proc_root: Path) -> tuple[str | None, str | None]:
    """(cgroup v2 path, cgroup v1 memory-controller path) from /proc/self/cgroup."""
    v2 = v1 = None
    try:
        lines = (proc_root / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def _v2_root(cgroup_root: Path) -> Path:
    # Pure v2 mounts the tree at the root; hybrid systems put it under unified/.
    if (cgroup_root / "unified" / "cgroup.controllers").exists():
        return cgroup_root / "unified"
    return cgroup_root


def cgroup_limit(proc_root: Path = Path("/proc"),
                 cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[int | None, str | None]:
    """The tightest memory limit on this process's cgroup and its ancestors, and its file.

    Limits are hierarchical: a parent's memory.max caps every child, so the whole path up to
    the root is read, and memory.high counts too (the kernel throttles and reclaims there).
    """
    v2, v1 = _cgroup_paths(proc_root)
    found: list[tuple[int, str]] = []
    checks: list[tuple[Path, tuple[str, ...]]] = []  # (cgroup directory, limit files to read)
    if v2 is not None:
        root = _v2_root(cgroup_root)
        checks += [(d, ("memory.max", "memory.high")) for d in _walk_up(root / v2.lstrip("/"), root)]
    if v1 is not None:
        root = cgroup_root / "memory"
        checks += [(d, ("memory.limit_in_bytes",)) for d in _walk_up(root / v1.lstrip("/"), root)]
    for directory, names in checks:
        for name in names:
            value = _read_limit(directory / name)
            if value is not None:
                found.append((value, str(directory / name)))
    if not found:
        return None, None
    value, source = min(found)
    return value, source


def mem_available(proc_root: Path = Path("/proc")) -> int | None:
    try:
        for line in (proc_root / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_budget(proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> dict:
    limit, source = cgroup_limit(proc_root, cgroup_root)
    available = mem_available(proc_root)
    known = [x for x in (limit, available) if x is not None]
    budget = max(0, min(known) - RESERVE_BYTES) if known else None
    return {"cgroup_limit_bytes": limit, "cgroup_limit_from": source, "available_bytes": available,
            "reserve_bytes": RESERVE_BYTES, "budget_bytes": budget}


# -- the plan ----------------------------------------------------------------------------------

def estimate_bytes(entry: dict) -> int | None:
    """Resident size a model is expected to take once loaded and running."""
    if entry["kind"] == "embedder":
        return EMBEDDER_RESIDENT.get(entry.get("name") or "")
    if entry.get("name") in MEASURED_RESIDENT:
        return MEASURED_RESIDENT[entry["name"]]
    if not entry.get("present"):
        return None
    folder = Path(entry["path"])
    weights = sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))
    return int(weights * ONNX_OVERHEAD)


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / MIB:.0f} MiB"


def _step(entry: dict, left: int | None) -> dict:
    estimate = estimate_bytes(entry)
    step: dict[str, Any] = {"load": False, "estimate_bytes": estimate, "set_by_user": entry["set_by_user"]}
    if not entry["present"] or entry.get("loads") is False:
        step["reason"] = entry.get("reason") or "not installed"
        return step
    fits = left is None or estimate is None or estimate <= left
    step["load"], step["fits"] = True, fits
    if entry["set_by_user"]:
        step["reason"] = "set by user" + ("" if fits else f" (needs {_mib(estimate)}, {_mib(left)} left)")
    elif left is None:
        step["reason"] = "memory limits unknown on this system"
    elif fits:
        step["reason"] = f"fits: needs {_mib(estimate)}, {_mib(left)} left"
    else:
        step["load"], step["reason"] = False, f"does not fit: needs {_mib(estimate)}, {_mib(left)} left"
    return step


def resource_plan(settings: Settings, models: dict[str, dict] | None = None, *,
                  proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> dict:
    """Which models to load, in order, within the memory budget; printable by the doctor.

    ``models`` is :func:`registry.list_models`'s output (looked up without loading if omitted).
    """
    if models is None:
        from cuba_memorys.judge.registry import list_models

        models = list_models(settings, load=False)
    memory = memory_budget(proc_root, cgroup_root)
    left = memory["budget_bytes"]
    steps = {}
    for kind in ORDER:
        steps[kind] = _step(models[kind], left)
        if steps[kind]["load"] and left is not None and steps[kind]["estimate_bytes"]:
            left -= steps[kind]["estimate_bytes"]
    loaded = [k for k in ORDER if steps[k]["load"]]
    return {"memory": memory, "models": steps, "left_bytes": left,
            "summary": f"budget {_mib(memory['budget_bytes'])}: load {', '.join(loaded) or 'nothing'}"}
