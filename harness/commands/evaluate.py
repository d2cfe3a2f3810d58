"""``rlfh-evaluate`` (``python -m harness.evaluate``) ``detector=NAME``: score a detector against labelled runs.

Python API: ``evaluate(detector, "results")`` returns an :class:`Evaluation` (see
:mod:`harness.detection.scoring`, where the scoring lives).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.commands.app import run_app
from harness.config import CONF_DIR, ConfigError
from harness.detection import REFERENCE
from harness.detection.base import Detector
from harness.detection.base import build_detector as build
from harness.detection.scoring import (
    SCORE_COLUMNS,
    Evaluation,
    _fmt,
    evaluate,
    load_dataset,
    write,
)

__all__ = ["Evaluation", "evaluate", "load_dataset", "main"]


# ---- command line ----------------------------------------------------------------------------

def build_detector(cfg: DictConfig) -> Detector:
    """Instantiate ``cfg.detector`` through Hydra (``_target_`` + keyword arguments)."""
    return build(cfg.detector)


def validate(cfg: DictConfig) -> None:
    build_detector(cfg)
    load_dataset(cfg.dataset)


@hydra.main(config_path=str(CONF_DIR), config_name="evaluate", version_base=None)
def app(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from rich.console import Console
    from rich.table import Table

    detector = build_detector(cfg)
    choice = HydraConfig.get().runtime.choices.get("detector")
    name = choice if cfg.detector._target_ == REFERENCE.get(choice) else type(detector).__name__
    try:
        ev = evaluate(detector, cfg.dataset, name=name)
    except ConfigError as exc:       # the detector broke the protocol mid-way (what it returned)
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    out_dir = Path(cfg.results_dir) / "evaluation" / name
    write(ev, out_dir, str(cfg.dataset))

    console = Console(width=max(110, Console().width), highlight=False)
    table = Table(title=f"detector {name} on {cfg.dataset} ({len(ev.runs)} runs)", title_justify="left")
    for c in SCORE_COLUMNS:
        table.add_column(c.replace("_", " "), justify="left" if c in ("group", "setup") else "right",
                         no_wrap=c in ("group", "setup"))
    for _, r in ev.scores[ev.scores["setup"] == "all"].iterrows():
        table.add_row(*[_fmt(r[c]) for c in SCORE_COLUMNS])
    console.print(table)
    noisy = ev.symptoms.sort_values("rate_healthy", ascending=False).head(3)
    noisy = noisy[noisy["rate_healthy"] > 0]
    if len(noisy):
        console.print("most false alarms on healthy runs come from: " + ", ".join(
            f"{r['symptom']} ({r['rate_healthy']:.0%} of healthy runs)" for _, r in noisy.iterrows()))
    console.print(f"report: {out_dir}/REPORT.md (per-setup scores, confusion matrix, symptoms, scores.png)")


def main(argv: Sequence[str] | None = None) -> None:
    """The command; ``argv`` defaults to the process's arguments (in-process: ``main([...])``)."""
    run_app(app, config_name="evaluate", validate=validate, argv=argv)


if __name__ == "__main__":
    main()
