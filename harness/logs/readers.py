"""Read whatever training log a user has into tidy records (row, step, key, value).

Formats: TensorBoard event files and run directories (tensorboard's own event reader), TRL's
``trainer_state.json`` (``log_history``) or a checkpoint / output directory holding it, SB3's
``progress.csv`` / ``progress.json``, W&B history exports (CSV / JSON lines with ``_step``),
verl console logs (``step:N - key:value - ...``), and plain CSV / JSON lines. A file still being
written is read up to its last complete record (a last line without its newline is dropped; a
truncated event file ends at its last complete record); a JSON document (trainer_state.json) is
read whole, and one cut short is an error naming where it ends. Which framework's names the records use
is decided later (:mod:`harness.logs.canonical`).
"""

from __future__ import annotations

import ast
import io
import json
import math
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.config import ConfigError

RECORD_COLUMNS = ("row", "step", "key", "value")
EVENT_GLOB = "events.out.tfevents*"
#: Ray's tag of a task's output: "(TaskRunner pid=N)", "(main_task pid=N, ip=..)", "(WorkerDict pid=N)"
RAY_TAG = r"\([^()]*pid=\d+[^()]*\)"
#: a verl console line, optionally prefixed by Ray's tag
VERL_LINE = re.compile(rf"^\s*(?:{RAY_TAG}\s*)?step:(\d+)\s+-\s+(.*?)\s*$")
#: Ray's tag at the start of a worker's console line
RAY_PREFIX = re.compile(rf"^\s*{RAY_TAG}\s*")
#: a terminal colour or style escape: Ray colours the prefix ("\x1b[2m\x1b[36m(main_task pid=N)\x1b[0m")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: another Ray task's output starting in the middle of a line (Ray interleaves workers' streams)
MIDLINE_RAY = re.compile(rf"{RAY_TAG}.*$")
NUMPY_REPR = re.compile(r"^np\.\w+\((.*)\)$")          # pprint of a numpy scalar: np.float64(0.01)
LOOKED_FOR = ("TensorBoard event files (events.out.tfevents.*), trainer_state.json, progress.csv / "
              "progress.json, a W&B history export or plain CSV / JSON lines, a verl console log")
#: stable-baselines3's Monitor files (``0.monitor.csv``: a ``#{"t_start": ..}`` line, then r,l,t per episode)
MONITOR_SUFFIX = "monitor.csv"
MONITOR_HOLDS = "each episode's return, length and time; no training metrics"
MONITOR_INSTEAD = ("diagnose the logger's output instead (progress.csv of configure(folder, ['csv']), or the "
                   "TensorBoard run that tensorboard_log= writes)")


@dataclass
class RawLog:
    """A log as read: tidy records in write order, and the hyperparameters the log carries (in
    the framework's own names; nested keys flattened with dots)."""

    records: pd.DataFrame                          # RECORD_COLUMNS; row or step may be NaN
    config: dict[str, Any] = field(default_factory=dict)
    source: str = ""                               # what was read, for people
    format: str = ""                               # tensorboard | csv | jsonl | trainer_state | verl_console | memory
    notes: list[str] = field(default_factory=list)


def records_frame(rows: list[tuple[float, float, str, float]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(RECORD_COLUMNS))
    return df.astype({"row": "float64", "step": "float64", "key": object, "value": "float64"})


def number(value: Any) -> float | None:
    """A logged value as a float (None for strings, bools, lists and other non-numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        m = NUMPY_REPR.match(text)
        if m:
            text = m.group(1)
        try:
            return float(text)
        except ValueError:
            return None
    return None


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts (a Hydra / W&B config) as dotted keys; W&B's {"value": v} leaves unwrapped."""
    if isinstance(obj, dict) and set(obj) >= {"value"} and set(obj) <= {"value", "desc"}:
        obj = obj["value"]
    if not isinstance(obj, dict):
        return {prefix: obj} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def complete_text(path: Path) -> str:
    """The file's text up to its last complete line (a line being written is dropped)."""
    text = path.read_text(errors="replace")
    if text and not text.endswith("\n"):
        cut = text.rfind("\n")
        text = text[: cut + 1] if cut >= 0 else text
    return text


def is_binary(path: Path) -> bool:
    head = path.read_bytes()[:4096]
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4      # a multi-byte character cut at 4096 is still text
    return False


# ---- TensorBoard ------------------------------------------------------------------------------
def text_config(text: str) -> dict[str, Any]:
    """A text summary holding hyperparameters: JSON (HF ``args``) or a |param|value| markdown table (CleanRL)."""
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            return flatten(obj)
    except ValueError:
        pass
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] and cells[0] not in ("param", "-") and not set(cells[0]) <= {"-"}:
            out[cells[0]] = cells[1]
    return out


def read_events(files: list[Path], source: str) -> RawLog:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    rows: list[tuple[float, float, str, float]] = []
    config: dict[str, Any] = {}
    n_events = 0
    for path in files:
        for event in EventFileLoader(str(path)).Load():
            n_events += 1
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                plugin = value.metadata.plugin_data.plugin_name
                if plugin == "text":
                    strings = tensor_util.make_ndarray(value.tensor).flatten()
                    text = "\n".join(s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s) for s in strings)
                    config.update(text_config(text))
                elif plugin == "scalars" or value.HasField("simple_value"):
                    if value.HasField("simple_value"):
                        x = float(value.simple_value)
                    else:
                        arr = tensor_util.make_ndarray(value.tensor)
                        if arr.size != 1 or arr.dtype.kind not in "fiu":
                            continue
                        x = float(arr.reshape(()))
                    rows.append((math.nan, float(event.step), value.tag, x))
    if n_events == 0:
        raise ConfigError(f"log={source} is not a TensorBoard event file (no complete record in it); "
                          f"looked for {LOOKED_FOR}")
    if not rows:
        raise ConfigError(f"log={source}: the TensorBoard events hold no scalars (a run that has not "
                          "logged a step yet, or a file truncated before its first one)")
    return RawLog(records_frame(rows), config, source, "tensorboard")


# ---- row-based text formats -------------------------------------------------------------------
def _rows_to_records(rows: list[dict[str, Any]], steps: list[float] | None = None) -> pd.DataFrame:
    out: list[tuple[float, float, str, float]] = []
    for i, row in enumerate(rows):
        step = steps[i] if steps is not None else math.nan
        for key, value in row.items():
            x = number(value)
            if x is not None:
                out.append((float(i), step, str(key), x))
    return records_frame(out)


def read_csv(path: Path) -> RawLog:
    text = complete_text(path)
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, on_bad_lines="skip")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"log={path} is not a CSV file: {str(exc).splitlines()[0]}") from None
    rows = [{k: v for k, v in rec.items() if v != ""} for rec in df.to_dict("records")]
    records = _rows_to_records(rows)
    if records.empty:
        raise ConfigError(f"log={path} has no numeric rows (columns: {', '.join(map(str, df.columns[:12])) or 'none'})")
    return RawLog(records, sibling_config(path), f"CSV {path} ({len(rows)} rows)", "csv")


def read_jsonl(path: Path) -> RawLog:
    rows, bad = [], 0
    for line in complete_text(path).splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(obj, dict):
            rows.append(obj)
    if not rows:
        raise ConfigError(f"log={path} is neither CSV nor JSON lines with numeric fields; looked for {LOOKED_FOR}")
    records = _rows_to_records(rows)
    if records.empty:
        raise ConfigError(f"log={path}: its JSON lines hold no numeric fields")
    notes = [f"{bad} line(s) that are not JSON skipped"] if bad else []
    return RawLog(records, sibling_config(path), f"JSON lines {path} ({len(rows)} rows)", "jsonl", notes)


def read_trainer_state(path: Path, state: dict[str, Any]) -> RawLog:
    history = state.get("log_history") or []
    entries = [e for e in history if isinstance(e, dict)]
    steps = [float(e["step"]) if number(e.get("step")) is not None else math.nan for e in entries]
    records = _rows_to_records([{k: v for k, v in e.items() if k != "step"} for e in entries], steps)
    if records.empty:
        raise ConfigError(f"log={path}: trainer_state.json has no log_history rows yet")
    config = {k: v for k, v in state.items() if k != "log_history" and not isinstance(v, (list, dict))}
    config.update(training_args(path.parent))
    return RawLog(records, config, f"trainer_state.json {path} ({len(entries)} log_history rows)", "trainer_state")


def training_args(checkpoint: Path) -> dict[str, Any]:
    """TrainingArguments saved beside trainer_state.json (``training_args.bin``: ``torch.save`` of the
    Trainer's args, a zip holding a pickle), read without executing it (never unpickle a user's file)
    and without the trainer's classes (TRL 0.26-0.28 pickle a PPOConfig no later TRL has): the
    scalar fields of the object it holds; {} when it is not such a file."""
    import zipfile

    path = checkpoint / "training_args.bin"
    if not path.exists():
        return {}
    try:
        with zipfile.ZipFile(path) as zf:
            member = next((n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if member is None:
                return {}
            obj = _InertUnpickler(io.BytesIO(zf.read(member))).load()
    except Exception:  # optional context: another format, a truncated file
        return {}
    state = obj.state if isinstance(obj, _Inert) else obj if isinstance(obj, dict) else {}
    values = {k: _inert_value(v) for k, v in state.items() if isinstance(k, str) and not k.startswith("_")}
    return {k: v for k, v in values.items() if isinstance(v, (int, float, bool, str))
            or (v is None and not isinstance(state[k], _Inert))}


class _Inert:
    """What a pickled object of any class becomes: its constructor arguments and its state, nothing run."""

    args: tuple[Any, ...] = ()
    state: dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.state = args, {}

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}          # (dict, slots)
        self.state = state if isinstance(state, dict) else {}


def _inert_value(value: Any) -> Any:
    """An enum member (``IntervalStrategy("steps")``) as its value; another inert object as None;
    anything else as it is."""
    if isinstance(value, _Inert):      # a class called with one value (an enum); not a function's call
        return value.args[0] if len(value.args) == 1 and type(value).__name__[:1].isupper() else None
    return value


#: the classes a TrainingArguments pickle may name that are plain data, kept as themselves
_PLAIN = {("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "str", "int", "float", "bool",
                                    "complex", "bytes", "bytearray", "slice")} | {("collections", "OrderedDict")}


class _InertUnpickler(pickle.Unpickler):
    """Every class or function a pickle names becomes an :class:`_Inert` subclass (plain containers stay
    themselves), and tensors become None: loading runs none of the file's code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        return type(name, (_Inert,), {})

    def persistent_load(self, pid: Any) -> None:
        return None


def read_verl_console(path: Path, lines: list[str]) -> RawLog:
    """verl's console log: one ``step:N - key:value - ...`` line per training step (colour escapes
    removed), and the configuration verl prints before training (:func:`console_config`)."""
    rows: list[dict[str, Any]] = []
    steps: list[float] = []
    for line in lines:
        m = VERL_LINE.match(line)
        if not m:
            continue
        row = {}
        for item in m.group(2).split(" - "):
            key, sep, value = item.rpartition(":")
            if sep and key.strip():
                row[key.strip()] = value
        steps.append(float(m.group(1)))
        rows.append(row)
    config = console_config(lines)
    source = f"console log {path} ({len(rows)} step lines{', its printed config' if config else ''})"
    return RawLog(_rows_to_records(rows, steps), config, source, "verl_console")


#: top-level keys of verl's Hydra config: a printed dict holding one of them is the run's configuration
VERL_CONFIG_KEYS = ("actor_rollout_ref", "algorithm", "trainer")
MAX_CONFIG_LINES = 5000


def console_config(lines: list[str]) -> dict[str, Any]:
    """The configuration verl prints before training (``main_ppo.py``: ``pprint`` of the resolved
    Hydra config, a dict over many lines, each under the printing task's Ray prefix; other workers'
    output interleaves with it and is skipped), flattened to dotted keys; {} when the log holds none
    or it does not read as a Python literal."""
    for start, line in enumerate(lines):
        m = RAY_PREFIX.match(line)
        prefix = m.group(0).strip() if m else ""
        first = line[m.end():].strip() if m else line.strip()
        if not first.startswith("{'") or not any(f"'{k}'" in first for k in VERL_CONFIG_KEYS):
            continue
        body = [first]
        for line in lines[start + 1:start + MAX_CONFIG_LINES]:
            if prefix and not line.lstrip().startswith(prefix):
                continue                          # another process's output, printed meanwhile
            text = MIDLINE_RAY.sub("", line.lstrip()[len(prefix):])   # another task's output cut into it
            body.append(text.strip())
            if not body[-1].endswith("}"):
                continue
            try:
                obj = ast.literal_eval("\n".join(body))
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                continue
            return flatten(obj) if isinstance(obj, dict) else {}
    return {}


def sb3_model_config(directory: Path) -> dict[str, Any]:
    """Hyperparameters of an SB3 model saved beside the log (``model.save()``: a zip whose "data"
    member is JSON). Constants only: schedules are pickled functions and are not read."""
    import zipfile

    for candidate in sorted(directory.glob("*.zip")):
        try:
            with zipfile.ZipFile(candidate) as zf:
                if "data" not in zf.namelist() or "policy.pth" not in zf.namelist():
                    continue
                data = json.loads(zf.read("data"))
                version = (zf.read("_stable_baselines3_version").decode("utf-8", "replace").strip()
                           if "_stable_baselines3_version" in zf.namelist() else "")
        except (zipfile.BadZipFile, ValueError, OSError):
            continue
        return {**sb3_data_config(data), **({"sb3_version": version} if version else {})}
    return {}


#: SB3 settings it saves as schedules (pickled callables) and the name its profile reads them by
SB3_SCHEDULES = ("learning_rate", "clip_range", "clip_range_vf")


def sb3_schedule(value: Any) -> dict[str, Any] | None:
    """What an SB3 schedule saved in a model's "data" is, read from its pickle's opcodes without
    executing it (never unpickle a user's file): ``{"kind": "constant" | "linear" | "function",
    "values": the float constants it holds, "name": the callable's name}``; None when ``value`` is not a
    serialized callable."""
    import base64
    import binascii
    import pickletools

    if not isinstance(value, dict) or ":serialized:" not in value:
        return None
    try:
        raw = base64.b64decode(value[":serialized:"])
        ops = list(pickletools.genops(raw))
    except (binascii.Error, ValueError, TypeError):
        return None
    floats = [float(a) for op, a, _ in ops if op.name in ("BINFLOAT", "FLOAT")]
    names = [a for op, a, _ in ops if op.name.endswith("UNICODE") and isinstance(a, str)]
    text = " ".join(names).lower()
    kind = ("constant" if "constant" in text and "linear" not in text else
            "linear" if "linear" in text else "function")
    name = next((n for n in names if "<locals>" in n), "") or next(      # FloatSchedule: SB3's wrapper
        (n for n in names if ("schedule" in n.lower() and n not in ("FloatSchedule", "value_schedule"))
         or n.startswith("get_")), "")
    return {"kind": kind, "values": floats, "name": name}


def sb3_data_config(data: dict[str, Any]) -> dict[str, Any]:
    """The constants of an SB3 model's saved "data" (JSON) and the rollout size they imply: what the
    log's hyperparameters are read as (a live monitor reads the same from the model it watches). A
    schedule holding one constant is that constant; any other schedule is described under
    ``<key>_schedule`` (text: not a setting the diagnosis reads)."""
    out = {k: v for k, v in data.items() if isinstance(v, (int, float, bool, str)) and not k.startswith("_")}
    for key in SB3_SCHEDULES:
        schedule = sb3_schedule(data.get(key))
        if schedule is None or key in out:
            continue
        if schedule["kind"] == "constant" and len(schedule["values"]) == 1:
            out[key] = schedule["values"][0]
        elif schedule["values"]:
            out[f"{key}_schedule"] = (f"{schedule['kind']} schedule {schedule['name'] or 'a function'} with "
                                      f"constants {', '.join(f'{v:g}' for v in schedule['values'])}")
    if number(out.get("n_steps")) and number(out.get("n_envs")):
        out["rollout_size"] = int(out["n_steps"]) * int(out["n_envs"])
    return out


def sibling_config(path: Path) -> dict[str, Any]:
    """Hyperparameters saved beside a CSV / JSON-lines export: config.json (flat or nested) or a W&B
    run's config.yaml ({key: {value: ...}})."""
    for name in ("config.json", "config.yaml", "config.yml"):
        candidate = path.parent / name
        if candidate.exists():
            try:
                if name.endswith(".json"):
                    obj = json.loads(candidate.read_text())
                else:
                    import yaml
                    obj = yaml.safe_load(candidate.read_text())
            except Exception:  # optional context
                continue
            if isinstance(obj, dict):
                return flatten(obj)
    return sb3_model_config(path.parent)


def json_document(path: Path, text: str) -> Any:
    """``text`` as one JSON document (a trainer_state.json, with or without its last newline), or None
    when it is not one (JSON lines are read line by line). A file that is one document (named
    trainer_state.json, or pretty-printed: its first line is a lone ``{``) but does not parse is a
    ConfigError naming where it breaks."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        first = text.lstrip().splitlines()[0].strip()
        if path.name != "trainer_state.json" and first != "{":
            return None
        where = f"{exc.msg if exc.msg.endswith(' at') else exc.msg + ' at'} line {exc.lineno} column {exc.colno}"
        if exc.msg.startswith("Unterminated") or exc.pos >= len(text.rstrip()):
            last = text.rstrip().count("\n") + 1
            raise ConfigError(f"log={path} is a truncated JSON file: it stops at line {last} before the document "
                              f"is closed ({where}); it was cut short or is still being written") from None
        raise ConfigError(f"log={path} is not valid JSON: {where}") from None


def read_file(path: Path) -> RawLog:
    if path.stat().st_size == 0:
        raise ConfigError(f"log={path} is empty; looked for {LOOKED_FOR}")
    if path.name.startswith("events.out.tfevents") or is_binary(path):
        return read_events([path], str(path))
    whole = path.read_text(errors="replace")
    if whole.lstrip().startswith("{"):
        obj = json_document(path, whole)
        if isinstance(obj, dict) and "log_history" in obj:
            return read_trainer_state(path, obj)
    text = complete_text(path)
    if not text.strip():
        raise ConfigError(f"log={path} has no complete line yet")
    if text.startswith('#{"t_start"'):
        raise ConfigError(f"log={path} is stable-baselines3's Monitor file ({MONITOR_HOLDS}): {MONITOR_INSTEAD}")
    if text.lstrip().startswith("{"):
        return read_jsonl(path)
    lines = [ANSI_ESCAPE.sub("", line) for line in text.splitlines()]
    if any(VERL_LINE.match(line) for line in lines):
        raw = read_verl_console(path, lines)
        if not raw.records.empty:
            return raw
    return read_csv(path)


# ---- directories ------------------------------------------------------------------------------
TEXT_LOGS = ("progress.csv", "progress.json", "history.csv", "history.jsonl", "metrics.csv", "metrics.jsonl")
TEXT_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".log", ".txt")


def _checkpoint_number(path: Path) -> int:
    m = re.search(r"checkpoint-(\d+)$", path.parent.name)
    return int(m.group(1)) if m else -1


def find_runs(root: Path) -> dict[str, list[Path]]:
    """The logs under a directory, one entry per run: {relative name: files to read}. A run is a
    directory holding event files (read together), a trainer_state.json (the checkpoints of one
    output_dir are one run: the latest holds the whole history), or a log file (CSV, JSON lines,
    console log); a directory with several log files lists each file as a run."""
    def name(d: Path) -> str:
        rel = str(d.relative_to(root))
        return "." if rel == "." else rel

    found: list[tuple[Path, list[Path]]] = []              # (directory, files of one run)
    states: dict[Path, list[Path]] = {}
    for f in root.rglob("trainer_state.json"):
        in_checkpoint = _checkpoint_number(f) >= 0 and f.parent != root
        states.setdefault(f.parent.parent if in_checkpoint else f.parent, []).append(f)
    found += [(owner, [max(files, key=_checkpoint_number)]) for owner, files in states.items()]
    events: dict[Path, list[Path]] = {}
    for f in sorted(root.rglob(EVENT_GLOB)):
        if f.is_file():
            events.setdefault(f.parent, []).append(f)
    # a TRL output_dir's TensorBoard runs (output_dir/runs/*) log the same training as its checkpoints
    for d, files in events.items():
        if d in states or any(owner in d.parents for owner in states):
            continue
        progress = [d / n for n in ("progress.csv", "progress.json") if (d / n).exists()]
        found.append((d, progress[:1] or files))   # SB3 wrote both: its CSV also has time/iterations
    taken = set(states) | set(events) | {f.parent for files in states.values() for f in files}
    for f in sorted(root.rglob("*")):
        if (f.is_file() and f.parent not in taken and not f.name.startswith(".")
                and (f.name in TEXT_LOGS or f.suffix in TEXT_SUFFIXES) and not f.name.endswith(MONITOR_SUFFIX)):
            found.append((f.parent, [f]))
    per_dir: dict[Path, int] = {}
    for d, _ in found:
        per_dir[d] = per_dir.get(d, 0) + 1
    runs = {}
    for d, files in found:
        runs[name(d) if per_dir[d] == 1 else str(files[0].relative_to(root))] = files
    return dict(sorted(runs.items()))


def choose_run(root: Path, runs: dict[str, list[Path]], run: str | None) -> tuple[str, list[Path]]:
    if run is not None:
        matches = [k for k in runs if k == run or Path(k).name == run or k.endswith("/" + run)]
        if len(matches) == 1:
            return matches[0], runs[matches[0]]
        raise ConfigError(f"run={run} is not one of the {len(runs)} runs in {root}: {', '.join(runs)}")
    if len(runs) == 1:
        return next(iter(runs.items()))
    shown = ", ".join(list(runs)[:12]) + (" ..." if len(runs) > 12 else "")
    raise ConfigError(f"log={root} holds {len(runs)} runs; choose one with run=NAME: {shown}")


def read(path: str | Path, run: str | None = None) -> RawLog:
    """Any supported log (a file or a directory) as records; ConfigError (one line) otherwise."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"log={path}: no such file or directory")
    if p.is_dir():
        runs = find_runs(p)
        if not runs:
            monitors = sorted(f.name for f in p.rglob(f"*{MONITOR_SUFFIX}"))
            if monitors:
                raise ConfigError(f"log={path}: no training log in this directory, only stable-baselines3's Monitor "
                                  f"files ({', '.join(monitors[:3])}: {MONITOR_HOLDS}): {MONITOR_INSTEAD}")
            raise ConfigError(f"log={path}: no training log in this directory; looked for {LOOKED_FOR}")
        name, files = choose_run(p, runs, run)
        label = f"{p}" if name == "." else f"{p}/{name}"
        if files[0].name.startswith("events.out.tfevents"):
            raw = read_events(files, label)
            raw.source = f"TensorBoard run {label} ({len(files)} event file{'s' if len(files) > 1 else ''})"
            if not raw.config:                          # SB3: the model saved beside its tensorboard_log
                raw.config = sb3_model_config(files[0].parent) or sb3_model_config(files[0].parent.parent)
        else:
            raw = read_file(files[0])
        if len(runs) > 1:
            raw.notes.append(f"run={name} of {len(runs)} runs in {p}")
        return raw
    if run is not None:
        raise ConfigError(f"run={run} chooses a run inside a directory; log={path} is a file")
    return read_file(p)
