"""Train one run (or reuse it from the store) and record it, whatever happens to it."""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import gymnasium as gym
import pandas as pd
import torch

import harness
from faults.none import NoFault
from harness.agents import sft
from harness.agents.base import Trainer, trainer_for
from harness.config import Experiment
from harness.store import RunStore, run_id

HEALTHY_FAULT_CFG = {"_target_": f"{NoFault.__module__}.{NoFault.__qualname__}", "onset": 0}

VERSIONED = ("torch", "gymnasium", "numpy", "pandas", "pyarrow", "hydra-core", "omegaconf",
             "stable-baselines3", "transformers", "trl")


@dataclass
class RunResult:
    run_id: str
    meta: dict[str, Any]
    metrics: pd.DataFrame
    reused: bool


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "harness": harness.__version__,
                "training": harness.TRAINING_VERSION}
    for dist in VERSIONED:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def numerics(threads: int | None = None) -> dict[str, Any]:
    """What a run's float rounding depends on besides its config: the torch build, the CPU kernels it
    dispatches to (``torch.backends.cpu.get_cpu_capability()``: e.g. AVX2, AVX512) and the thread count."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(),
            "threads": torch.get_num_threads() if threads is None else threads}


def numerics_difference(meta: dict[str, Any], exp: Experiment) -> dict[str, tuple[Any, Any]]:
    """{what: (the stored run's, this machine's)} for each numeric setting that differs (a run stored
    before numerics were recorded is compared on its torch version only)."""
    here = numerics(exp.torch_threads)
    stored = meta.get("numerics") or {"torch": (meta.get("versions") or {}).get("torch")}
    return {k: (stored[k], now) for k, now in here.items()
            if stored.get(k) is not None and str(stored[k]) != str(now)}


def healthy_twin(exp: Experiment) -> Experiment:
    """The same experiment with fault=none."""
    return dataclasses.replace(exp, fault=NoFault(), fault_cfg=dict(HEALTHY_FAULT_CFG))


def trainer(exp: Experiment) -> Trainer:
    """The trainer the experiment's backend names for its algorithm (harness/conf/backend/<name>.yaml)."""
    return trainer_for(exp.backend, exp.algo.name)


def effective_hyperparams(exp: Experiment) -> dict[str, Any]:
    """Hyperparameters in effect while the fault is active (they differ under some faults)."""
    return dataclasses.asdict(exp.fault.hyperparams(exp.algo))


def describe_action_space(exp: Experiment) -> dict[str, Any]:
    env = gym.make(exp.env.id, **exp.env.kwargs)
    space = env.action_space
    env.close()
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "discrete", "n": int(space.n)}
    return {"type": "box", "dim": int(space.shape[0]) if space.shape else 1}


def user_config(exp: Experiment) -> Any:
    """The hyperparameters as the run's config holds them (a misconfigured fault's bad value
    included); what a detector is shown."""
    return exp.fault.user_config(exp.algo)


def configured_optimizer_steps(exp: Experiment) -> int:
    configured = user_config(exp)
    return configured.n_epochs * configured.n_minibatches


def start_checkpoint(exp: Experiment) -> dict[str, Any] | None:
    """GRPO and PPO-LM on token tasks start from a cached warm-up checkpoint: its directory and checksum."""
    if exp.algo.name not in ("grpo", "ppo_lm") or exp.env.id != "harness/ToySeq-v0":
        return None
    path = sft.checkpoint_dir(exp)
    if sft.problem(path) is not None:
        return {"dir": str(path), "status": sft.problem(path)}
    meta = json.loads((path / sft.META_FILE).read_text())
    return {"dir": str(path), "key": meta["key"], "files": meta["files"]}


def n_updates_planned(exp: Experiment) -> int:
    return trainer(exp).updates_planned(exp)


@dataclass
class Recording:
    """What a run has produced so far: its rows, minibatch steps, episodes and framework files."""

    rows: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    episodes: list[dict] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)   # a framework's own log, kept beside the run
    status: str = "ok"
    error: str | None = None

    def add(self, row: dict) -> bool:
        """Record one update's row; True when the run stops there (non-finite: ``diverged``)."""
        self.steps += [{"update": row["update"], **s} for s in row.pop("steps", [])]
        self.episodes += row.pop("episodes", [])
        self.files.update(row.pop("files", {}))
        self.rows.append(row)
        if row["nonfinite"]:
            self.status = "diverged"
            return True
        return False

    def crashed(self, exc: BaseException) -> None:
        self.status = "crashed"
        self.error = "".join(traceback.format_exception(exc)).strip()


def _stored(store: RunStore, rid: str, exp: Experiment, on_start: Callable[[str, bool], None] | None
            ) -> RunResult | None:
    """The stored run ``rid`` if it can be reused; otherwise None, with an unfinished copy removed."""
    problem = store.problem(rid)
    if problem is None and not exp.retrain:
        if on_start:
            on_start(rid, True)
        return RunResult(rid, store.load_meta(rid), store.load_metrics(rid), reused=True)
    if problem not in (None, "absent") and not problem.startswith("unfinished"):
        print(f"run {rid} is corrupt ({problem}): training it again", file=sys.stderr)
    store.discard_unfinished(rid)
    if on_start:
        on_start(rid, False)
    return None


def _save(store: RunStore, rid: str, exp: Experiment, rec: Recording, wall_s: float) -> RunResult:
    meta = build_meta(exp, rid, rec.status, rec.error, len(rec.rows), wall_s)
    store.discard(rid)               # retrain=true: the stored run is replaced only now
    meta = store.save(rid, meta, rec.rows, rec.steps, rec.episodes, rec.files)
    return RunResult(rid, meta, store.load_metrics(rid), reused=False)


def get_or_train(exp: Experiment, on_update: Callable[[dict], None] | None = None,
                 on_start: Callable[[str, bool], None] | None = None) -> RunResult:
    """Return the stored run for ``exp``, training and storing it first if needed (``exp.retrain``:
    train it even when it is stored, and replace the stored run once the new one is done).

    A diverged run (non-finite loss, gradient or parameter) stops at that update and is
    stored with status ``diverged``; an exception stores status ``crashed`` with the
    traceback. Either way the metrics up to the last update are kept. An interrupt
    (KeyboardInterrupt) stores nothing: the stored run, if any, is left as it was.
    """
    store = RunStore(exp.results_dir)
    rid = run_id(exp.key())
    with store.lock(rid):
        reused = _stored(store, rid, exp, on_start)
        if reused is not None:
            return reused
        torch.set_num_threads(exp.torch_threads)
        rec = Recording()
        start = time.perf_counter()
        try:
            for row in trainer(exp).train(exp):
                stop = rec.add(row)
                if on_update:
                    on_update(row)
                if stop:
                    break
        except Exception as exc:  # a crash is a result to store
            rec.crashed(exc)
        return _save(store, rid, exp, rec, time.perf_counter() - start)


def build_meta(exp: Experiment, rid: str, status: str, error: str | None, n_updates: int,
               wall_s: float) -> dict[str, Any]:
    fault = exp.fault
    return {
        "run_id": rid,
        "fault": fault.name,
        "fault_params": fault.params(),
        "onset_update": fault.onset if fault.name != "none" else None,
        "fault_target": exp.fault_cfg["_target_"],
        "algo": exp.algo.name,
        "algo_variant": exp.algo.variant,
        "env": exp.env.name,
        "env_id": exp.env.id,
        "backend": exp.backend.name,
        "seed": exp.seed,
        "is_control": bool(getattr(exp.algo, "is_control", False)),
        "fault_form": getattr(fault, "form", None) if fault.name != "none" else None,
        "fault_kind": fault.kind if fault.name != "none" else None,
        "hyperparameters": {
            "configured": dataclasses.asdict(user_config(exp)),
            "effective": effective_hyperparams(exp),
        },
        "configured_optimizer_steps": configured_optimizer_steps(exp),
        "start_checkpoint": start_checkpoint(exp),
        "action_space": describe_action_space(exp),
        "total_timesteps": exp.env.total_timesteps,
        "torch_threads": exp.torch_threads,
        "numerics": numerics(),
        "status": status,
        "error": error,
        "n_updates": n_updates,
        "n_updates_planned": n_updates_planned(exp),
        "wall_s": round(wall_s, 3),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sampled": exp.sampled,
        "command": " ".join(sys.argv),
        "versions": library_versions(),
        "config": exp.key(),
    }
