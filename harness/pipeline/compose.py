"""Composing a command line into a validated experiment, exactly as ``python -m harness`` does.

:func:`make_experiment` is the Python API behind the command line; :func:`preflight` composes and
validates every job a command line asks for before Hydra runs anything, so a bad override ends
with one line naming the valid choices and nothing stored is touched.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from faults import register_configs as register_fault_configs
from harness.config import CONF_DIR, ConfigError, Experiment, did_you_mean, register_configs, unknown_choice
from harness.pipeline.assemble import load_experiment

CONFIG_NAME = "config"
FULL_PRODUCT_LIMIT = 64   # validate every job up to this many; above, each value once

register_configs()
register_fault_configs()      # fault=<name>: every registered fault class, in Hydra's ConfigStore


def one_line(exc: BaseException) -> str:
    """Hydra/OmegaConf errors span lines (key, object type, search path...); keep the gist."""
    text = str(exc) + (f": {exc.__cause__}" if exc.__cause__ is not None else "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("full_key:", "object_type=", "reference_type=",
                                                     "Config search path", "provider=",
                                                     "Set the environment variable"))]
    text = " ".join(keep) or type(exc).__name__
    missing = re.search(r"Could not find '(?:.*/)?([^/']+)/([^/']+)'\s*Available options in '[^']+':\s*(.*)", text)
    if missing:   # the same words as for a bad override on the command line
        group, value, options = missing.groups()
        return unknown_choice(group, value, sorted(options.split()))
    return text


def _values(override) -> list[str]:
    if override.is_sweep_override():
        return list(override.sweep_string_iterator())
    return [override.get_value_element_as_str()]


def _jobs(overrides, group_keys: set[str]) -> list[list[str]]:
    """The jobs to validate: the whole sweep when small; otherwise every combination of
    config-group choices, and every other value at least once."""
    batches = BasicSweeper.split_arguments(overrides, None)[0] if overrides else [[]]
    if len(batches) <= FULL_PRODUCT_LIMIT:
        return batches
    groups = [o for o in overrides if o.key_or_group in group_keys]
    others = [o for o in overrides if o.key_or_group not in group_keys]

    def line(o, value: str) -> str:
        return f"{o.input_line.split('=', 1)[0]}={value}"

    firsts = [line(o, _values(o)[0]) for o in others]
    jobs = [[*combo, *firsts] for combo in
            itertools.product(*[[line(o, v) for v in _values(o)] for o in groups])]
    base = jobs[0][: len(groups)]
    for i, o in enumerate(others):
        for value in _values(o)[1:]:
            jobs.append([*base, *firsts[:i], line(o, value), *firsts[i + 1:]])
    return jobs


def preflight(argv: list[str], config_name: str = CONFIG_NAME,
              validate: Callable[[DictConfig], object] = load_experiment) -> None:
    """Compose and ``validate`` every job of this command line; raise ConfigError if any is bad."""
    args = get_args_parser().parse_args(argv)
    if args.help or args.hydra_help or args.info or args.shell_completion:
        return
    config_name = args.config_name or config_name
    if config_name == CONFIG_NAME:
        args.overrides = with_default_env(args.overrides)
    try:
        overrides = OverridesParser.create().parse_overrides(args.overrides)
    except Exception as exc:  # Hydra's grammar errors
        raise ConfigError(one_line(exc)) from None

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            _check_jobs(overrides, config_name, args.multirun, validate)
    finally:
        GlobalHydra.instance().clear()


def _check_jobs(overrides, config_name: str, multirun: bool,
                validate: Callable[[DictConfig], object]) -> None:
    loader = GlobalHydra.instance().config_loader()
    for o in overrides:
        choices = loader.get_group_options(o.key_or_group)
        if not choices or o.is_delete():
            continue
        for value in _values(o):
            if value not in choices and value != "null":
                raise ConfigError(unknown_choice(o.key_or_group.split("/")[-1], value, sorted(choices)))
    sweeps = any(o.is_sweep_override() for o in overrides)
    if not multirun and sweeps:
        raise ConfigError("a comma-separated or range() value sweeps: add -m (multirun)")
    sweep = list(overrides)
    if multirun:
        fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
        base = _compose(config_name, fixed, hydra=True)
        if OmegaConf.select(base, "hydra.sweeper._target_", default="").endswith("CatalogueSweeper"):
            if sweeps:
                raise ConfigError("the catalogue sweep builds its own job list: drop comma/range values "
                                  "(set hydra.sweeper.seeds=N or hydra.sweeper.faults=[...] instead)")
            return   # the catalogue sweeper validates its jobs itself, before launching any
        params = OmegaConf.select(base, "hydra.sweeper.params") or {}
        preset = [f"{k}={v}" for k, v in params.items()]
        sweep = OverridesParser.create().parse_overrides(preset) + sweep
    group_keys = {o.key_or_group for o in sweep if loader.get_group_options(o.key_or_group)}
    for job in _jobs(sweep, group_keys):
        validate(_compose(config_name, job))


def _compose(config_name: str, overrides: list[str], hydra: bool = False) -> DictConfig:
    try:
        return compose(config_name, overrides=overrides, return_hydra_config=hydra)
    except Exception as exc:  # Hydra/OmegaConf composition errors
        key = re.match(r"Could not override '([^']+)'", str(exc))
        raise ConfigError((key and _unknown_key(config_name, overrides, key.group(1))) or one_line(exc)) from None


def _unknown_key(config_name: str, overrides: list[str], key: str) -> str | None:
    """``Could not override 'algo.clip_rnge': no such key; did you mean algo.clip_range? valid keys: ...`` for
    an override of a key the composed config does not have (the keys beside it, composed without that
    override), or None (Hydra's own words then)."""
    parent = key.rpartition(".")[0]
    prefix = f"{parent}." if parent else ""
    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("~+") != key]
    try:
        cfg = compose(config_name, overrides=rest)
    except Exception:  # the rest does not compose either: Hydra's own words
        return None
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return None
    valid = sorted(str(k) for k in node.keys() if k != "hydra" and not str(k).startswith("_"))
    if not valid:       # a free mapping (e.g. diagnose's hp): keys are added with +
        return f"Could not override '{key}': {parent} has no keys; add one with +{key}=VALUE"
    hint = did_you_mean(key.rpartition(".")[2], valid, prefix)
    return f"Could not override '{key}': no such key; {hint}valid keys: {', '.join(valid)}"


def with_default_env(overrides: list[str]) -> list[str]:
    """GRPO's default env is the token task: ``algo=grpo`` (or a GRPO variant) with no ``env=`` on
    the command line runs ``env=toyseq`` (Hydra's defaults list cannot depend on another group)."""
    algo = next((a.split("=", 1)[1] for a in overrides if a.startswith("algo=")), "")
    if algo.startswith("grpo") and "," not in algo and not any(
            a.lstrip("+~").startswith("env=") or a.lstrip("+~") == "env" for a in overrides):
        return ["env=toyseq", *overrides]
    return list(overrides)


def make_experiment(overrides: list[str], config_name: str = CONFIG_NAME) -> Experiment:
    """Compose ``overrides`` exactly as ``python -m harness`` does and validate them (the Python
    API behind the command line; raises ConfigError). Inside a running Hydra job (a sweep's
    worker) the job's own Hydra instance composes."""
    overrides = with_default_env(overrides)
    if GlobalHydra.instance().is_initialized():
        return load_experiment(_compose(config_name, overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return load_experiment(_compose(config_name, overrides))


def override_value(v: Any) -> str:
    """``v`` written in Hydra's override grammar, so that ``key=<it>`` parses back to ``v``: nested
    dicts and lists as ``{k:v,...}`` / ``[...]``, and a string quoted when it would not read back as
    itself unquoted (spaces, a number's or a keyword's spelling, the grammar's own characters)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{k}:{override_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(override_value(x) for x in v) + "]"
    text = str(v)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]*", text) and text.lower() not in _HYDRA_WORDS:
        return text
    # quoted: a quote is escaped, and so is a run of backslashes before a quote or the closing one
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), text) + "'"


#: unquoted, these read as a bool, null or a float, not as the string
_HYDRA_WORDS = frozenset({"true", "false", "null", "inf", "nan"})


__all__ = ["CONF_DIR", "CONFIG_NAME", "make_experiment", "one_line", "override_value", "preflight", "with_default_env"]
