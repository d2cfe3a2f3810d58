"""Write a view (:class:`RawLog` records) as the framework writes it.

``tensorboard``: event files through torch.utils.tensorboard.SummaryWriter (what CleanRL, SB3 and
the transformers Trainer use; SB3's own logger for profile=sb3), scalars as float32 like theirs;
hyperparameters as the text summary the framework writes (CleanRL ``hyperparameters``, the
Trainer's ``args``). ``csv`` / ``jsonl``: SB3's own progress.csv / progress.json for profile=sb3;
for the others a W&B-style history (one row per logged step, ``_step`` plus the framework's step
key; TRL keys carry the ``train/`` prefix W&B gets) with the hyperparameters in config.json beside
it. ``native``: the file the framework itself writes (SB3 progress.csv, CleanRL TensorBoard, TRL
``checkpoint-N/trainer_state.json``, verl's console log, canonical metrics.csv).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from harness.logs.profiles import Profile, load_profile
from harness.logs.readers import RawLog

FORMATS = ("tensorboard", "csv", "jsonl", "native")


def _rows(raw: RawLog) -> list[tuple[float, dict[str, float]]]:
    """The records' rows in order: (step, {key: value})."""
    out: list[tuple[float, dict[str, float]]] = []
    for _, grp in raw.records.groupby("row", sort=True):
        out.append((float(grp["step"].iloc[0]), dict(zip(grp["key"], grp["value"]))))
    return out


def _int_if_whole(x: float) -> float | int:
    return int(x) if math.isfinite(x) and float(x).is_integer() else x


def _json_value(x: float) -> Any:
    return _int_if_whole(x) if math.isfinite(x) else x      # json.dumps writes NaN / Infinity like Python does


# ---- TensorBoard -------------------------------------------------------------------------------
def _text_config(profile: Profile, config: dict[str, Any]) -> tuple[str, str] | None:
    if not config:
        return None
    if profile.text_config == "hyperparameters":                       # CleanRL's markdown table
        table = "\n".join(f"|{k}|{v}|" for k, v in config.items())
        return "hyperparameters", "|param|value|\n|-|-|\n" + table
    return profile.text_config or "config", json.dumps(config, indent=2, sort_keys=True)


def write_tensorboard(raw: RawLog, profile: Profile, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    if profile.name == "sb3":
        return write_sb3(raw, profile, out, ["tensorboard"])
    from torch.utils.tensorboard import SummaryWriter

    prefix = "train/" if profile.strip_prefixes else ""
    writer = SummaryWriter(log_dir=str(out))
    text = _text_config(profile, raw.config)
    if text is not None:
        writer.add_text(*text)
    for step, values in _rows(raw):
        for key, value in values.items():
            if key in profile.summary_keys:
                continue                    # the Trainer's end-of-training summary is not a TensorBoard scalar step
            writer.add_scalar(prefix + key, value, int(step))
    writer.close()
    return sorted(out.glob("events.out.tfevents*"))


# ---- stable-baselines3: its own logger ---------------------------------------------------------
def write_sb3(raw: RawLog, profile: Profile, out: Path, formats: list[str]) -> list[Path]:
    from stable_baselines3.common.logger import configure

    with contextlib.redirect_stdout(io.StringIO()):          # "Logging to ..."
        logger = configure(str(out), formats)
    excluded = set(profile.tensorboard_exclude)
    for step, values in _rows(raw):
        for key, value in values.items():
            value = _int_if_whole(value) if key in ("time/iterations", "time/total_timesteps",
                                                    "train/n_updates") else value
            logger.record(key, value, exclude="tensorboard" if key in excluded else None)
        logger.dump(step=int(step))
    logger.close()
    return sorted(p for p in out.iterdir() if p.is_file())


# ---- W&B-style history -------------------------------------------------------------------------
def _history(raw: RawLog, profile: Profile) -> list[dict[str, Any]]:
    prefix = "train/" if profile.strip_prefixes else ""
    step_key = profile.history_step_key or profile.step_keys[0]
    rows = []
    for i, (step, values) in enumerate(_rows(raw)):
        row: dict[str, Any] = {"_step": i}
        if profile.strip(step_key) not in values:
            row[step_key] = _int_if_whole(step)
        for key, value in values.items():
            name = key if key in profile.summary_keys else prefix + key
            row[name] = _int_if_whole(value) if key in profile.step_keys else _json_value(value)
        rows.append(row)
    return rows


def write_history(raw: RawLog, profile: Profile, out: Path, fmt: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = _history(raw, profile)
    path = out / profile.files.get(fmt, f"history.{fmt}")
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, restval="")
            writer.writeheader()
            for r in rows:
                writer.writerow({k: repr(float(v)) if isinstance(v, float) else v for k, v in r.items()})
    written = [path]
    if raw.config:
        (out / "config.json").write_text(json.dumps(raw.config, indent=2, sort_keys=True) + "\n")
        written.append(out / "config.json")
    return written


# ---- framework-native files ----------------------------------------------------------------------
def write_trainer_state(raw: RawLog, profile: Profile, out: Path) -> list[Path]:
    """transformers' TrainerState.save_to_json: log_history entries carry their "step"."""
    history = []
    for step, values in _rows(raw):
        entry = {k: _json_value(v) for k, v in values.items()}
        entry["step"] = int(step)
        history.append(entry)
    steps = max((e["step"] for e in history), default=0)
    state = {"best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
             "epoch": history[-1].get("epoch", 1.0) if history else 0.0, "eval_steps": 500, "global_step": steps,
             "is_hyper_param_search": False, "is_local_process_zero": True, "is_world_process_zero": True,
             "log_history": history, "logging_steps": int(raw.config.get("logging_steps", 1)),
             "max_steps": steps, "num_input_tokens_seen": 0, "num_train_epochs": 1, "save_steps": steps,
             "stateful_callbacks": {}, "total_flos": 0.0, "train_batch_size": None, "trial_name": None,
             "trial_params": None}
    path = out / f"checkpoint-{steps}" / "trainer_state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return [path]


def write_verl_console(raw: RawLog, profile: Profile, out: Path) -> list[Path]:
    """verl's console logger (concat_dict_to_str: "step:N - key:pformat(value) - ..."), as Ray
    prints it from the TaskRunner actor."""
    import pprint

    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for step, values in _rows(raw):
        items = [f"step:{int(step)}"] + [f"{k}:{pprint.pformat(_int_if_whole(v) if k in ('training/global_step', 'training/epoch') else v)}"
                                         for k, v in values.items()]
        lines.append("(TaskRunner pid=1) " + " - ".join(items))
    path = out / profile.files.get("native", "console.log")
    path.write_text("\n".join(lines) + "\n")
    return [path]


def write(raw: RawLog, profile: str | Profile, fmt: str, out: str | Path) -> list[Path]:
    """Write a view in ``fmt`` into the directory ``out``; the files written."""
    prof = load_profile(profile)
    out = Path(out)
    if fmt == "native":
        fmt = {"cleanrl": "tensorboard", "sb3": "csv", "canonical": "csv"}.get(prof.name, "native")
    if fmt == "tensorboard":
        return write_tensorboard(raw, prof, out)
    if prof.name == "sb3" and fmt in ("csv", "jsonl"):
        out.mkdir(parents=True, exist_ok=True)
        return write_sb3(raw, prof, out, ["csv" if fmt == "csv" else "json"])
    if fmt in ("csv", "jsonl"):
        return write_history(raw, prof, out, fmt)
    if prof.name == "trl":
        return write_trainer_state(raw, prof, out)
    if prof.name == "verl":
        return write_verl_console(raw, prof, out)
    raise ValueError(f"format {fmt!r} for profile {prof.name}")
