"""The catalogue command's settings (:class:`CatalogueSettings`), checked once from the Hydra config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from harness.analysis.model import check_kind
from harness.config import ConfigError, check_range
from harness.metrics import CANONICAL


@dataclass(frozen=True)
class CatalogueSettings:
    """What ``python -m harness.catalogue`` builds (harness/conf/catalogue.yaml documents each key).

    ``n_mc``: permutations drawn where an exact test is too large; ``trace_metrics``: the metrics to
    plot per cell (empty: chosen per cell); ``plots`` / ``dataset`` / ``views``: write the plots, the
    labelled dataset, the per-framework-view verdicts; ``model``: fit the diagnosis model on the
    diverse runs (``left_out``: also score each fault left out; ``model_kind``: its family;
    ``model_catalogue_runs``: the catalogue's calibration seeds train it too)."""

    results_dir: Path
    n_mc: int
    trace_metrics: tuple[str, ...]
    plots: bool
    dataset: bool
    model: bool = True
    left_out: bool = True
    model_kind: str = "logistic"
    views: bool = True
    model_catalogue_runs: bool = True

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> CatalogueSettings:
        """The settings from the composed config; a :class:`ConfigError` (one line) on a bad value."""
        check_range("", "n_mc", cfg.n_mc, ge=100, le=1_000_000, kind=int)
        trace = tuple(cfg.trace_metrics or ())
        unknown = [m for m in trace if m not in CANONICAL]
        if unknown:
            raise ConfigError(f"unknown metric {unknown[0]!r} in trace_metrics; valid: {', '.join(CANONICAL)}")
        root = Path(cfg.results_dir)
        if not (root / "runs").is_dir():
            raise ConfigError(f"no runs under {root}/runs: train some first (python -m harness ...)")
        kind = check_kind(str(cfg.get("model_kind", "logistic")))
        return cls(root, int(cfg.n_mc), trace, bool(cfg.plots), bool(cfg.dataset), bool(cfg.get("fit_model", True)),
                   bool(cfg.get("left_out", True)), kind, bool(cfg.get("views", True)),
                   bool(cfg.get("model_catalogue_runs", True)))
