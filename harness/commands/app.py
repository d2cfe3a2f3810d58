"""What every command does before Hydra runs: validate the whole command line first; and the old names
of renamed keys, which keep working (with a one-line note)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, read_write

from harness.config import INTERRUPTED, ConfigError, did_you_mean
from harness.pipeline.assemble import load_experiment
from harness.pipeline.compose import CONFIG_NAME, preflight


def run_app(hydra_app: Callable[[], None], config_name: str = CONFIG_NAME,
            validate: Callable[[DictConfig], object] = load_experiment,
            argv: Sequence[str] | None = None, positional: str | None = None,
            spellings: dict[str, str] | None = None) -> None:
    """Validate the command line (one-line error, exit 2), then hand it to the Hydra app.
    ``argv``: the arguments (default: the process's own, ``sys.argv[1:]``); given, they are what Hydra
    reads while the app runs, so a command runs in-process as from a shell (``main(["fault=none"])``).
    ``positional``: the key a bare path on the command line sets (``rlfh-diagnose run.csv`` is
    ``rlfh-diagnose log=run.csv``); ``spellings``: keys users type -> the config's key
    (:func:`respelled`). Ctrl-C anywhere ends in one line and exit code 130."""
    try:
        _validate_and_run(hydra_app, config_name, validate, argv, positional, spellings or {})
    except KeyboardInterrupt:     # the commands say what was being done when they can; this is the rest
        print("interrupted: stopped before finishing; files are written whole or not at all, so nothing "
              "half-written was kept (run the command again)", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None
    finally:
        _forget_caught_interrupt()


def _forget_caught_interrupt() -> None:
    """CPython remembers a KeyboardInterrupt that escaped code run by ``exec`` of a string (dataclasses
    and namedtuples make their methods that way) even after it was caught, and under ``python -m``
    then ends the process by SIGINT (exit -2) instead of with its exit code: what CI saw (the command's
    own line printed, then -2; which exec the interrupt landed in was not identified). A string executed to completion clears that memory; every
    interrupt has been caught and answered (exit 130) by the time this runs."""
    exec("None")


def _validate_and_run(hydra_app: Callable[[], None], config_name: str, validate: Callable[[DictConfig], object],
                      argv: Sequence[str] | None, positional: str | None, spellings: dict[str, str]) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if positional is not None:
            argv = with_positional(argv, positional)
        argv = respelled(argv, spellings)
        preflight(argv, config_name, validate)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    own = sys.argv
    sys.argv = [own[0] if own else "rlfh", *argv]            # what Hydra reads
    try:
        hydra_app()
    finally:
        sys.argv = own


def renamed(cfg: DictConfig, aliases: dict[str, tuple[str, Any]]) -> list[str]:
    """Old key -> (new key, its default): an old key given on the command line (its YAML default is
    null) sets the new one, as it did before the rename; returns one note per old key used. Both
    given with different values is a ConfigError."""
    notes = []
    for old, (new, default) in aliases.items():
        value = cfg.get(old)
        if value is None:
            continue
        if cfg.get(new) not in (default, value):
            raise ConfigError(f"{old}={value} and {new}={cfg.get(new)}: {old}= is the old name of {new}=, give one")
        with read_write(cfg):
            cfg[new] = value
        notes.append(f"note: {old}= is now {new}= (the old name still works)")
    return notes


def respelled(argv: list[str], spellings: dict[str, str]) -> list[str]:
    """The command line with each ``KEY=VALUE`` whose KEY is in ``spellings`` written with the config's
    key. A command's own key named like a config group (``algo``: harness/conf/algo/) is read by Hydra
    as a choice of that group ("Could not override 'algo'"), so diagnose and watch keep theirs as
    ``algorithm`` and take ``algo=`` as users write it."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        out.append(f"{spellings[key]}={value}" if eq and key in spellings else arg)
    return out


#: what diagnose's and watch's algo= (config key ``algorithm``) takes; None: from the profile / the log
LOG_ALGOS = ("ppo", "grpo")


def check_algorithm(value: str | None) -> None:
    """A one-line error for an algo= the log readers do not know."""
    if value not in (None, *LOG_ALGOS):
        raise ConfigError(f"algo={value!r}; {did_you_mean(value, LOG_ALGOS)}valid choices: ppo, grpo "
                          "(default: from the profile)")


#: Hydra's options whose value is the next argument (``--cfg job``): never a positional path
HYDRA_VALUED = {"--cfg", "-c", "--package", "-p", "--info", "-i", "--config-path", "-cp", "--config-name", "-cn",
                "--config-dir", "-cd", "--experimental-rerun", "--shell-completion", "-sc"}


def with_positional(argv: list[str], key: str) -> list[str]:
    """The command line with its one bare argument (no ``=``, not an option) turned into ``key=ARG``;
    raises ConfigError for a bare argument that names no file or directory, or for more than one."""
    bare = [i for i, a in enumerate(argv) if "=" not in a and not a.startswith(("-", "+", "~"))
            and not (i and argv[i - 1] in HYDRA_VALUED)]
    if not bare:
        return list(argv)
    if len(bare) > 1 or any(a.startswith(f"{key}=") for a in argv):
        raise ConfigError(f"one {key} at a time: {' '.join(argv[i] for i in bare)} "
                          f"(give it as {key}=PATH)")
    path = argv[bare[0]]
    if not Path(path).exists():
        raise ConfigError(f"{path}: no such file or directory (the {key} to read: {key}=PATH)")
    return [f"{key}={path}" if i == bare[0] else a for i, a in enumerate(argv)]
