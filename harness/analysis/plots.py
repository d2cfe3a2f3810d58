"""Catalogue plots: a faults x signatures heatmap and, per cell, metric traces faulty vs healthy."""

from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from faults import FAULTS
from harness.analysis import signatures
from harness.analysis.runs import Cell, RunSet
from harness.metrics import PROGRESS, applicable
from harness.store import atomic_write_bytes

N_TRACES = 6


def _save(fig: plt.Figure, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def heatmap(sigs: pd.DataFrame, path: Path) -> None:
    """Rows: each fault cell (firing rate on faulty seeds), then each setup's healthy runs and
    controls; columns: signatures. ``sigs``: the catalogue's signature rows."""
    names = list(signatures.SIGNATURES)
    rows, labels = [], []
    for cell, g in sigs.groupby("cell", sort=False):
        rows.append(g.set_index("name")["rate_faulty"].reindex(names).to_numpy(dtype=float))
        labels.append(cell)
    for setup, g in sigs.assign(setup=sigs["cell"].str.split(" | ", regex=False).str[-1]).groupby("setup"):
        first = g[g["cell"] == g["cell"].iloc[0]].set_index("name")
        for column, what in (("rate_healthy", "healthy"), ("rate_control", "controls")):
            values = first[column].reindex(names).to_numpy(dtype=float)
            if not np.isnan(values).all():
                rows.append(values)
                labels.append(f"[{what}] | {setup}")
    data = np.array(rows)
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * len(names), 1.2 + 0.32 * len(rows)))
    ax.imshow(np.nan_to_num(data, nan=0.0), cmap="Reds", vmin=0, vmax=1, aspect="auto")
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            if not np.isnan(data[i, j]) and data[i, j] > 0:
                ax.text(j, i, f"{100 * data[i, j]:.0f}", ha="center", va="center", fontsize=6,
                        color="white" if data[i, j] > 0.6 else "black")
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_title("% of seeds on which each signature fired (after onset): faults, then healthy runs "
                 "and look-alike controls", fontsize=9)
    _save(fig, path)


def trace_metrics(cell: Cell, metrics: pd.DataFrame) -> list[str]:
    """The cell's progress metric, the metrics its expected signatures read, then the metrics
    that separate it best (smallest all-seed p-value first; ``metrics``: the catalogue's metric
    rows, possibly none for the cell)."""
    algo = cell.info["algo"]
    chosen = [PROGRESS[algo]]
    cls = FAULTS.get(cell.info["fault"])
    for sig in (cls.expected if cls else ()):
        chosen.append(signatures.SIGNATURES[sig].metric)
    mets = metrics[metrics["cell"] == cell.label].sort_values("p_value")
    chosen += list(mets["name"])
    return list(dict.fromkeys(chosen))[:N_TRACES]


def _band(frames: list[pd.Series]) -> pd.DataFrame:
    frame = pd.concat(frames, axis=1).replace([np.inf, -np.inf], np.nan)
    return pd.DataFrame({"median": frame.median(axis=1), "lo": frame.quantile(0.25, axis=1),
                         "hi": frame.quantile(0.75, axis=1)})


def _aligned(rs: RunSet, rid: str, metric: str, onset: int) -> pd.Series:
    """A run's metric indexed by updates since ``onset`` (negative before it)."""
    m = rs.metrics[rid]
    return pd.Series(m[metric].to_numpy(dtype=float), index=m["update"].to_numpy() - onset, name=rid)


def traces(cell: Cell, rs: RunSet, metrics: list[str], path: Path) -> None:
    """Median and interquartile band over seeds, faulty vs healthy, each run aligned on the onset of
    its faulty seed (mid-run onsets differ per seed)."""
    onset_of = {rs.metas[r]["seed"]: int(rs.metas[r]["onset_update"] or 0) for r in cell.faulty}
    typical = int(np.median(list(onset_of.values()))) if onset_of else 0
    cols = 3
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.6 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for run_ids, color, label in ((cell.healthy, "tab:blue", "healthy"), (cell.faulty, "tab:red", cell.info["fault"])):
            if not run_ids:
                continue
            band = _band([_aligned(rs, r, metric, onset_of.get(rs.metas[r]["seed"], typical)) for r in run_ids])
            ax.plot(band.index, band["median"], color=color, lw=1.3, label=f"{label} (n={len(run_ids)})")
            ax.fill_between(band.index, band["lo"], band["hi"], color=color, alpha=0.2, lw=0)
            peak = np.nanmax(np.abs(band["hi"].to_numpy(dtype=float))) if band["hi"].notna().any() else 0
            if peak > 1e3:
                ax.set_yscale("symlog", linthresh=1.0)
        ax.axvline(0, color="black", ls="--", lw=0.8)
        ax.set_title(metric, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    onsets = sorted(set(onset_of.values()))
    fig.suptitle(f"{cell.label}: median and interquartile band over seeds, aligned on the onset "
                 f"(update {onsets[0] if len(onsets) == 1 else f'{onsets[0]}-{onsets[-1]}'})", fontsize=10)
    fig.supxlabel("updates since the fault's onset", fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def write_all(sigs: pd.DataFrame, metrics: pd.DataFrame, rs: RunSet, out_dir: Path,
              fixed_metrics: tuple[str, ...] = ()) -> dict[str, str]:
    """Write every plot from the catalogue's signature rows (``sigs``) and metric rows (``metrics``,
    with at least the columns ``cell``, ``name``, ``p_value``); returns {cell label or 'heatmap':
    path relative to the catalogue dir}."""
    written = {"heatmap": "plots/heatmap.png"}
    heatmap(sigs, out_dir / "heatmap.png")
    for cell in rs.cells():
        chosen = fixed_metrics or trace_metrics(cell, metrics)
        names = [m for m in chosen if m in applicable(cell.info["algo"])]
        name = f"traces_{cell.slug}.png"
        traces(cell, rs, names, out_dir / name)
        written[cell.label] = f"plots/{name}"
    return written



def run_traces(runs: list[tuple[str, pd.DataFrame]], metrics: dict[str, str], onset: int, title: str,
               path: Path) -> None:
    """One run and its healthy twin, metric by metric against the update: ``runs`` is [(label, metrics
    frame)], the faulty run first (red, drawn on top), then the twin (blue, wider, so equal values show
    both); ``metrics`` is {metric: a subtitle (the signatures that fired on it)}; a dashed line marks
    the fault's onset."""
    names = [m for m in metrics if any(m in frame and frame[m].notna().any() for _, frame in runs)]
    cols = min(3, max(1, len(names)))
    rows = math.ceil(len(names) / cols) if names else 1
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 2.9 * rows + 1.0), squeeze=False,
                             layout="constrained")
    styles = [("tab:red", 1.4, 3), ("tab:blue", 2.6, 2), ("tab:gray", 1.0, 1)]
    for ax, metric in zip(axes.flat, names):
        peak = 0.0
        for (label, frame), (color, width, z) in zip(runs, styles):
            if metric not in frame:
                continue
            values = frame[metric].to_numpy(dtype=float)
            values = np.where(np.isfinite(values), values, np.nan)
            ax.plot(frame["update"].to_numpy(), values, color=color, lw=width, alpha=0.9 if z == 3 else 0.55,
                    zorder=z, label=label, marker="o" if len(values) <= 12 else None, ms=3)
            if np.isfinite(values).any():
                peak = max(peak, float(np.nanmax(np.abs(values))))
        if peak > 1e3:
            ax.set_yscale("symlog", linthresh=1.0)
        if onset > 0:
            ax.axvline(onset, color="black", ls="--", lw=0.9)
        ax.set_title("\n".join([metric, *textwrap.wrap(metrics[metric], 62)]), fontsize=10)
        ax.set_xlabel("update", fontsize=9)
        ax.grid(alpha=0.3, lw=0.5)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    if names:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        if onset > 0:
            handles.append(plt.Line2D([], [], color="black", ls="--", lw=0.9))
            labels.append(f"fault onset (update {onset})")
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=11)
    _save(fig, path)
