"""``rlfh-catalogue`` (``python -m harness.catalogue``): aggregate stored runs into the catalogue and the
labelled dataset; ``publish=true`` (or ``only``) copies the diagnosis model into the package;
``render=only`` rewrites the catalogue's pages, verdict map and heatmaps from the files it wrote, reading no run;
``refit=PATH`` scores and fits the diagnosis model on a table of training examples alone;
``merge=PATH`` puts a part (a catalogue built from some setups' runs) into results_dir's catalogue.

The work is done in :mod:`harness.catalogue.build`; this module is the command.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from omegaconf import DictConfig

from harness.analysis.model import check_kind, load_models
from harness.analysis.protocols import KeptModels
from harness.catalogue.build import check_examples, refit, render, write, write_directions
from harness.catalogue.parts import BUILD_FILE, merge
from harness.catalogue.settings import CatalogueSettings
from harness.commands.app import run_app
from harness.config import CONF_DIR, ConfigError
from harness.detection.diagnosis import DIRECTIONS_FILE, MODEL_FILE, PACKAGED_MODEL
from harness.pipeline.compose import make_experiment, override_value
from harness.store import atomic_write_bytes

#: what the package ships of a built model (examples.parquet and scores.parquet stay in results_dir)
PUBLISHED = (MODEL_FILE.name, "model_card.json", DIRECTIONS_FILE.name)


def publish_mode(cfg: DictConfig) -> bool | str:
    mode = cfg.get("publish", False)
    if mode not in (True, False, "only"):
        raise ConfigError(f"publish={mode!r}; valid choices: false, true (after building), only (build nothing)")
    return mode


def render_mode(cfg: DictConfig) -> bool:
    """Whether the command line asks for ``render=only`` (a ConfigError for any other value but false,
    or with ``publish``)."""
    mode = cfg.get("render", False)
    if mode not in (False, "only"):
        raise ConfigError(f"render={mode!r}; valid choices: false (build from the runs), only (re-render the pages "
                          "and the summary plots from the catalogue's files, build nothing)")
    if mode and publish_mode(cfg):
        raise ConfigError("render=only and publish= both given: run them one after the other")
    return bool(mode)


def publish(results_dir: Path) -> list[Path]:
    """Copy the model built under ``results_dir/catalogue/model/`` into the package (harness/data/model/,
    :data:`PACKAGED_MODEL`'s directory), where rlfh-diagnose reads it when no results_dir has its own;
    refuses a model this code cannot read. The catalogue's fault directions (``directions.json``, what
    ``reference=`` ranks by) go with it, written from catalogue.parquet first when a build left none."""
    source = results_dir / "catalogue" / MODEL_FILE
    load_models(source)              # a ConfigError (one line) for a missing, foreign or stale model
    cat = results_dir / "catalogue" / "catalogue.parquet"
    if not (results_dir / "catalogue" / DIRECTIONS_FILE).exists() and cat.exists():
        write_directions(results_dir / "catalogue", pd.read_parquet(cat))
    written = []
    for name in PUBLISHED:
        if not (source.parent / name).exists() and name == DIRECTIONS_FILE.name:
            continue                 # no catalogue beside this model: nothing to rank a reference comparison by
        target = PACKAGED_MODEL.parent / name
        atomic_write_bytes(target, (source.parent / name).read_bytes())
        written.append(target)
    return written


def refit_path(cfg: DictConfig) -> Path | None:
    """The examples table ``refit=PATH`` names (None without it); a one-line error with ``render`` or
    ``publish=only``, which build nothing."""
    path = cfg.get("refit", None)
    if path in (None, False, ""):
        return None
    if render_mode(cfg) or publish_mode(cfg) == "only":
        raise ConfigError("refit= with render=only or publish=only: refit builds the model, those build nothing")
    return Path(str(path))


def refit_algos(cfg: DictConfig) -> tuple[str, ...]:
    """The algorithms ``refit_algos=[...]`` names (empty: every one); a one-line error without ``refit=``
    or naming an algorithm the model has no views of."""
    algos = cfg.get("refit_algos", None)
    if algos in (None, False, "", []):
        return ()
    names = (algos,) if isinstance(algos, str) else tuple(str(a) for a in algos)
    if refit_path(cfg) is None:
        raise ConfigError("refit_algos= without refit=PATH: it says which algorithms' models a refit replaces")
    KeptModels.check(Path(cfg.results_dir) / "catalogue" / MODEL_FILE, names)
    return names


def merge_path(cfg: DictConfig) -> Path | None:
    """The part ``merge=PATH`` names (None without it); a one-line error with another mode or for a
    directory that holds no built part."""
    path = cfg.get("merge", None)
    if path in (None, False, ""):
        return None
    if render_mode(cfg) or publish_mode(cfg) or cfg.get("refit", None):
        raise ConfigError("merge= with render=, publish= or refit=: run them one after the other")
    part = Path(str(path))
    if not (part / "catalogue" / BUILD_FILE).is_file():
        raise ConfigError(f"merge={part}: no built part there (no catalogue/{BUILD_FILE}): build it first "
                          f"(python -m harness.catalogue results_dir={part} fit_model=false dataset=false)")
    return part


def validate(cfg: DictConfig) -> None:
    refit_algos(cfg)
    if merge_path(cfg) is not None:
        return
    if refit_path(cfg) is not None:
        check_kind(str(cfg.get("model_kind", "logistic")))
        check_examples(refit_path(cfg))
    elif render_mode(cfg):
        catalogue = Path(cfg.results_dir) / "catalogue"
        if not (catalogue / "catalogue.parquet").is_file():
            raise ConfigError(f"no catalogue under {catalogue} (no catalogue.parquet): build it from the runs first "
                              f"(python -m harness.catalogue results_dir={cfg.results_dir})")
    elif publish_mode(cfg) == "only":
        load_models(Path(cfg.results_dir) / "catalogue" / MODEL_FILE)
    else:
        CatalogueSettings.from_cfg(cfg)


def refused_today(cell: dict[str, Any]) -> str | None:
    """Why today's code refuses to train a catalogue cell's fault on its setup (the one-line ConfigError
    a run command would print), or None when it trains it; cells of an algorithm variant are not judged."""
    if cell.get("algo_variant", "default") != "default":
        return None
    params = json.loads(cell.get("fault_params") or "{}")
    overrides = [f"algo={cell['algo']}", f"env={cell['env']}", f"backend={cell['backend']}", f"fault={cell['fault']}",
                 *(f"fault.{k}={override_value(v)}" for k, v in params.items())]
    onsets = str(cell.get("onsets") or "").replace(",", " ").split()     # "2, 5, 7": the cell's seeds' onsets
    if cell.get("onset_kind") == "mid" and onsets and "onset" not in params:
        overrides.append(f"fault.onset={int(float(onsets[0]))}")
    try:
        make_experiment(overrides)
    except ConfigError as exc:
        return str(exc)
    return None


@hydra.main(config_path=str(CONF_DIR), config_name="catalogue", version_base=None)
def app(cfg: DictConfig) -> None:
    part = merge_path(cfg)
    if part is not None:
        parts = merge(Path(cfg.results_dir), part, refused=refused_today)
        print(f"merged {part}: {len(parts[-1].cells)} cells of {', '.join(parts[-1].setups)}; "
              f"the catalogue has {len(parts)} parts", flush=True)
        if parts[-1].note:
            print(parts[-1].note.replace("; retired ", "\nretired "))
        for path in render(Path(cfg.results_dir)).values():
            print(f"wrote {path}")
        return
    examples = refit_path(cfg)
    if examples is not None:
        print(f"refitting the diagnosis model on {examples} (no run is read)", flush=True)
        for path in refit(Path(cfg.results_dir), examples, str(cfg.get("model_kind", "logistic")),
                          bool(cfg.get("left_out", True)), refit_algos(cfg)).values():
            print(f"wrote {path}")
        if publish_mode(cfg):
            for path in publish(Path(cfg.results_dir)):
                print(f"published {path}")
        return
    if render_mode(cfg):
        for path in render(Path(cfg.results_dir)).values():
            print(f"wrote {path}")
        return
    mode = publish_mode(cfg)
    if mode == "only":
        for path in publish(Path(cfg.results_dir)):
            print(f"published {path}")
        return
    settings = CatalogueSettings.from_cfg(cfg)
    rs_count = len(list((settings.results_dir / "runs").iterdir()))
    print(f"reading {rs_count} run directories under {settings.results_dir}/runs ...", flush=True)
    try:
        written = write(settings)
    except ConfigError as exc:        # what the store holds, found while reading it (two runs of one seed in a cell)
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    cat = pd.read_parquet(written["catalogue"]) if "catalogue" in written else pd.DataFrame()
    if not cat.empty:
        cells = cat.drop_duplicates("cell")
        print(f"{len(cells)} fault cells; manifested: {int(cells['manifested'].sum())}, "
              f"not: {int((~cells['manifested']).sum())}")
        for _, c in cells.iterrows():
            print(f"  {c['cell']}: {'manifested via ' + c['manifested_by'] if c['manifested'] else 'NOT manifested'}"
                  f"{f' ({c.n_diverged} diverged)' if c['n_diverged'] else ''}")
    for path in written.values():
        print(f"wrote {path}")
    if mode:
        for path in publish(settings.results_dir):
            print(f"published {path}")


def main(argv: Sequence[str] | None = None) -> None:
    """The command; ``argv`` defaults to the process's arguments (in-process: ``main([...])``)."""
    run_app(app, config_name="catalogue", validate=validate, argv=argv)


if __name__ == "__main__":
    main()
