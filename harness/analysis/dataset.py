"""The labelled dataset: every stored run's metric rows with their labels, for detectors.

Written to ``results_dir/dataset/``:

- ``data.parquet``: one row per (run, update): run_id, update, env_step, every canonical
  metric, and the labels fault, fault_active, is_control, algo, algo_variant, env, backend,
  seed, onset, status.
- ``runs.parquet``: one row per run: labels, status and error, how much it learned
  (``learning_share``, ``learns``: :mod:`harness.analysis.learning`), ``label`` (:mod:`harness.analysis.labels`:
  the fault, ``healthy``, ``not_learning`` for a healthy run that does not learn, ``inert`` for a fault
  that changes nothing under its configuration), and the configured and effective hyperparameters
  (``configured.<name>``, ``effective.<name>``).
- ``splits.parquet``: deterministic splits per run: ``by_seed`` (seed % 5 in 0-2 train, 3
  val, 4 test) and ``heldout_<env>`` (that env is test, the others train).
- ``DATASHEET.md``: counts per label, how the data were generated, library versions.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import labels
from harness.analysis.labels import INERT
from harness.analysis.learning import NOT_LEARNING, learning
from harness.analysis.runs import RunSet, run_labels
from harness.config import setup_label
from harness.markdown import table
from harness.metrics import CANONICAL
from harness.store import RunStore, atomic_write_bytes, atomic_write_parquet

LABELS = ["origin", "fault", "fault_form", "fault_kind", "is_control", "algo", "algo_variant", "env", "backend",
          "seed", "onset", "status"]


def runs_table(rs: RunSet) -> pd.DataFrame:
    rows = []
    store = RunStore(rs.root) if rs.root else None
    for rid, m in rs.metas.items():
        hp = m["hyperparameters"]
        learned = learning(rs.metrics[rid], m, store.load_episodes(rid) if store else None)
        label = labels.label(m, learned.learns)
        rows.append({
            "run_id": rid, **run_labels(m), "label": label, "learning_share": learned.share,
            "learns": learned.learns, "env_id": m["env_id"], "error": m["error"],
            "n_updates_planned": m["n_updates_planned"], "wall_s": m["wall_s"],
            "total_timesteps": m["total_timesteps"], "action_space": json.dumps(m["action_space"], sort_keys=True),
            **{f"configured.{k}": v for k, v in hp["configured"].items()},
            **{f"effective.{k}": v for k, v in hp["effective"].items()},
        })
    return pd.DataFrame(rows).sort_values("run_id", ignore_index=True)


def data_table(rs: RunSet, runs: pd.DataFrame) -> pd.DataFrame:
    labels = runs.set_index("run_id")[LABELS]
    frames = []
    for rid in runs["run_id"]:
        m = rs.metrics[rid].copy()
        m.insert(0, "run_id", rid)
        for col in LABELS:
            m[col] = labels.at[rid, col]
        frames.append(m)
    data = pd.concat(frames, ignore_index=True)
    order = ["run_id", "update", "env_step", "fault", "fault_active", *[c for c in LABELS if c != "fault"],
             *CANONICAL]
    return data.reindex(columns=order)      # a metric a run predates is NaN


def splits_table(runs: pd.DataFrame) -> pd.DataFrame:
    by_seed = runs["seed"].mod(5).map({0: "train", 1: "train", 2: "train", 3: "val", 4: "test"})
    out = pd.DataFrame({"run_id": runs["run_id"], "by_seed": by_seed})
    for env in sorted(runs["env"].unique()):
        out[f"heldout_{env}"] = (runs["env"] == env).map({True: "test", False: "train"})
    return out


def _sampled_lines(runs: pd.DataFrame) -> list[str]:
    """How widely the diverse runs' configured hyperparameters vary (distinct values, range)."""
    diverse = runs[runs["origin"] == "diverse"]
    if diverse.empty:
        return []
    out = [f"- the {len(diverse)} diverse runs' configured hyperparameters (distinct values; range):"]
    for col in sorted(c for c in diverse.columns if c.startswith("configured.")):
        values = pd.to_numeric(diverse[col], errors="coerce").dropna()
        if values.nunique() > 1:
            out.append(f"  - `{col.split('.', 1)[1]}`: {values.nunique()} values; {values.min():.4g} .. {values.max():.4g}")
    envs = diverse.groupby("algo")["env"].unique()
    out += [f"- diverse {algo} envs: {', '.join(sorted(v))}" for algo, v in envs.items()]
    return out


def _values_line(values: list[int]) -> str:
    """A short list in full; a long one as its count and range (each run's value is in runs.parquet)."""
    if len(values) <= 12:
        return ", ".join(map(str, values))
    return f"{len(values)} distinct values from {values[0]} to {values[-1]} (each run's in runs.parquet)"


def as_module_command(command: str) -> str:
    """A stored run's ``command`` (its ``sys.argv`` joined by spaces) as a user types it in a shell:
    ``.../harness/__main__.py -m ...`` -> ``python -m harness -m ...`` (the checkout a run was trained
    from is not part of how to make it), each word quoted where a shell would split or expand it
    (``'hydra.sweeper.setups_only=[ppo/acrobot/sb3]'``)."""
    head, _, rest = command.partition(" ")
    if head.endswith(("harness/__main__.py", "harness\\__main__.py")):
        head = "python -m harness"
    return " ".join([head, *(_shell_word(w) for w in rest.split(" ") if w)])


def _shell_word(word: str) -> str:
    """A word as a shell reads it back: as is when safe, else in single quotes, or in double quotes
    when it holds single quotes and nothing a shell expands inside double quotes."""
    quoted = shlex.quote(word)
    if quoted == word or "'" not in word or any(c in word for c in '"$`\\!'):
        return quoted
    return f'"{word}"'


def datasheet(runs: pd.DataFrame, data: pd.DataFrame, rs: RunSet, command: str) -> str:
    """DATASHEET.md of the labelled dataset: what it is, how it was made (``command``), the runs per
    fault and setup by status, the splits, the columns of data.parquet / runs.parquet, and what the
    labels do and do not mean."""
    setups = [setup_label(*r) for r in runs[["algo", "algo_variant", "env", "backend"]].itertuples(index=False)]
    counts = (runs.assign(setup=setups)
              .pivot_table(index=["fault", "setup"], columns="status", values="run_id", aggfunc="count",
                           fill_value=0))
    lines = ["# Datasheet: rl-fault-harness labelled training runs", "",
             "## What it is",
             "Training-metric traces of small PPO and GRPO agents, some with a known bug injected from a "
             "known update (the onset), with healthy twins and healthy look-alike controls. Meant for "
             "training and scoring detectors of broken RL training. Every run is reproducible from its "
             "config and seed (runs.parquet; the run store's meta.json has the full config).", "",
             "## Composition",
             f"- {len(runs)} runs, {len(data)} metric rows (one per update); "
             f"{int((runs['fault'] != 'none').sum())} faulty runs, {int((runs['fault'] == 'none').sum())} "
             f"healthy runs of which {int(runs['is_control'].sum())} are look-alike controls.",
             f"- status: {dict(Counter(runs['status']))} (diverged and crashed runs are kept, with their "
             "metrics up to the last update).", "",
             "- origin: " + ", ".join(f"{k} {v}" for k, v in Counter(runs["origin"]).items()) + " (`catalogue`: "
             "the catalogue sweep's fixed setups, faults at default severity, matched seeds with healthy twins; "
             "`diverse`: the dataset sweep, every run drawn from a sampling space: setup, hyperparameters, fault "
             "and severity, onset, seed; its draws are in each run's meta.json `sampled`).",
             f"- onset: {int(((runs['fault'] != 'none') & (runs['onset'] > 0)).sum())} of "
             f"{int((runs['fault'] != 'none').sum())} faulty runs switch the fault on mid-run (onset > 0).",
             *_sampled_lines(runs), "",
             "Runs per label:", "",
             *table(["fault", "setup", *counts.columns],
                    [[fault, setup, *(int(v) for v in row)] for (fault, setup), row in counts.iterrows()])]
    seeds = sorted(int(s) for s in runs["seed"].unique())
    budgets = runs.groupby(["algo", "env"])["total_timesteps"].unique()
    commands = Counter(as_module_command(m.get("command", "")) for m in rs.metas.values())
    versions: dict[str, set[str]] = {}
    for m in rs.metas.values():
        for lib, v in m["versions"].items():
            versions.setdefault(lib, set()).add(v)
    lines += ["", "## Labels",
              "- `fault` (run level): the injected fault, `none` for healthy runs and controls.",
              f"- `label` (runs.parquet): what the run is, for training a model: the fault, `healthy`, "
              f"`not_learning` ({int((runs['label'] == NOT_LEARNING).sum())} runs: healthy, but the configuration "
              f"does not learn in its setup) or `inert` ({int((runs['label'] == INERT).sum())} runs: the fault "
              "changes nothing under the run's configuration, e.g. the KL sign flipped with beta = 0). Neither "
              "of the last two is a class the diagnosis is trained or scored on.",
              "- `fault_active` (row level): True from the onset update on.",
              "- `onset`: the update at which the fault switches on.",
              "- `fault_form`: how the bug is met: misconfigured (the configured value a detector sees is the "
              "bad one), overridden (config says one thing, code uses another) or code bug.",
              "- `fault_kind`: training (the run is broken) or telemetry (training is healthy, a logged metric "
              "is wrong).",
              "- `origin`: catalogue or diverse (see Composition).",
              "- `is_control`: a healthy configuration that shows a raw fault symptom by construction "
              "(one epoch and one minibatch: ratio == 1 is correct there).",
              "- `status`: ok | diverged (a loss, gradient or parameter went non-finite) | crashed.", "",
              "## Columns", "",
              "Metric columns follow docs/design.md (canonical metrics):", "",
              *[f"- `{name}`: {doc}" for name, doc in CANONICAL.items()], "",
              "## Splits (splits.parquet)",
              "- `by_seed`: seed % 5 in {0, 1, 2} train, 3 val, 4 test (every fault in every split).",
              "- `heldout_<env>`: runs on that env are test, all others train.", "",
              "## Generation",
              f"- seeds: {_values_line(seeds)}",
              *[f"- budget for {algo} on {env}: {_values_line(sorted(int(b) for b in v))} env steps"
                for (algo, env), v in budgets.items()],
              "- commands that produced the runs (count):",
              *[f"  - `{c}` ({n})" for c, n in commands.most_common()],
              f"- dataset written by `{command}`", "",
              "## Library versions",
              *[f"- {lib}: {', '.join(sorted(v))}" for lib, v in sorted(versions.items())], "",
              "## Caveats",
              "- Toy environments (CartPole, Acrobot, LunarLander, Pendulum; digit-sequence token tasks on a "
              "2-layer transformer): signatures are about training dynamics, not scale.",
              "- The diagnosis model is fitted on the diverse runs; score a fitted detector on runs it has not "
              "seen (`evaluate` leaves its training runs out).",
              "- Thresholds of named signatures are hypotheses; the catalogue reports how they fare.", ""]
    return "\n".join(lines)


def write(rs: RunSet, out_dir: Path, command: str) -> dict[str, Path]:
    runs = runs_table(rs)
    data = data_table(rs, runs)
    paths = {"data": out_dir / "data.parquet", "runs": out_dir / "runs.parquet",
             "splits": out_dir / "splits.parquet", "datasheet": out_dir / "DATASHEET.md"}
    atomic_write_parquet(paths["data"], data)
    atomic_write_parquet(paths["runs"], runs)
    atomic_write_parquet(paths["splits"], splits_table(runs))
    atomic_write_bytes(paths["datasheet"], datasheet(runs, data, rs, command).encode())
    return paths


def load(results_dir: str | Path) -> dict[str, Any]:
    """The dataset's tables as DataFrames: {'data', 'runs', 'splits'}."""
    root = Path(results_dir) / "dataset"
    return {name: pd.read_parquet(root / f"{name}.parquet") for name in ("data", "runs", "splits")}
