"""Catalogue plots: a verdict map (where each fault manifested, per setup and onset), a faults x
signatures heatmap per setup and, per cell, metric traces faulty vs healthy; each names at its top
the command that regenerates it."""

from __future__ import annotations

import io
import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from PIL import Image

from faults import FAULTS
from harness.analysis import signatures
from harness.analysis.runs import Cell, RunSet
from harness.metrics import PROGRESS, applicable
from harness.store import atomic_write_bytes

N_TRACES = 6


def _save(fig: plt.Figure, path: Path, **savefig: Any) -> None:
    """The figure (closed) as a PNG of 256 colours: a third of its full-colour size with the same look
    (a catalogue has hundreds of plots, and they are kept in git). ``savefig``: matplotlib's options
    (default: 110 dpi, cropped to the drawing)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **(savefig or {"dpi": 110, "bbox_inches": "tight"}))
    plt.close(fig)
    buf.seek(0)
    small = io.BytesIO()
    Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(small, "PNG", optimize=True)
    atomic_write_bytes(path, small.getvalue())


#: the heatmaps: saved at this dpi, at most this wide (pixels), their rows and columns this many inches
HEATMAP_DPI = 100
HEATMAP_MAX_WIDTH = 1800
ROW_IN, COL_IN, LABEL_IN = 0.19, 0.3, 3.4
#: the verdict map's file under plots/, and its colours: manifested, no trace, undecided (not run: white)
VERDICTS_FILE = "verdicts.png"
VERDICT_COLOURS = {"manifested": "#b2182b", "no trace": "#92c5de", "changed nothing logged": "#d9d9d9",
                   "undecided": "#fdd49e"}


@dataclass(frozen=True)
class HeatmapPanel:
    """One setup's signature heatmap: ``rates`` (rows x signatures, NaN where a signature is not
    evaluated), each row's label, and how many rows are fault cells (the rest are the setup's healthy
    runs and look-alike controls)."""

    setup: str
    rates: pd.DataFrame
    n_fault_rows: int
    faults: list[str]          # the fault of each fault row (blocks are drawn between faults)

    @property
    def file(self) -> str:
        """The panel's image, under the catalogue's plots/."""
        return heatmap_file(self.setup)


def heatmap_file(setup: str) -> str:
    """A setup's heatmap file name (``ppo/acrobot/native`` -> ``heatmap_ppo_acrobot_native.png``)."""
    return "heatmap_" + setup.replace("/", "_") + ".png"


def _row_label(c: pd.Series, with_params: bool) -> str:
    """A fault row's label: the fault, its parameters when the catalogue holds the fault with several,
    and the mid-run onset."""
    params = "".join(f" {k}={v}" for k, v in json.loads(c["fault_params"]).items()) if with_params else ""
    return f"{c['fault']}{params}{' (mid-run)' if c['onset_kind'] == 'mid' else ''}"


def _several_params(cells: pd.DataFrame) -> pd.Series:
    """Per cell: whether its fault appears with more than one parameter set (then rows name them)."""
    return cells.groupby("fault")["fault_params"].transform("nunique") > 1


def heatmap_panels(sigs: pd.DataFrame) -> list[HeatmapPanel]:
    """The signature heatmaps, one per setup (``sigs``: the catalogue's signature rows), in setup order:
    each fault cell's held-out firing rate on faulty seeds (sorted by fault, onset), then the setup's
    healthy runs and controls (from its first cell); columns: the signatures evaluated on any row, in
    registry order."""
    order = {name: i for i, name in enumerate(signatures.SIGNATURES)}
    every = sigs.drop_duplicates("cell")
    several = dict(zip(every["cell"], _several_params(every)))
    panels = []
    for setup, part in sigs.groupby("setup", sort=True):
        cells = part.drop_duplicates("cell").sort_values(["fault", "fault_params", "onset_kind", "cell"])
        rows: dict[str, pd.Series] = {}
        for _, c in cells.iterrows():
            rows[_row_label(c, several[c["cell"]])] = part[part["cell"] == c["cell"]].set_index("name")["rate_faulty"]
        first = part[part["cell"] == part["cell"].iloc[0]].set_index("name")
        for column, what in (("rate_healthy", "healthy runs"), ("rate_control", "look-alike controls")):
            if first[column].notna().any():
                rows[f"[{what}]"] = first[column]
        rates = pd.DataFrame(rows).T.astype(float)
        rates = rates[sorted(rates.columns[rates.notna().any()], key=lambda n: (order.get(n, len(order)), n))]
        panels.append(HeatmapPanel(str(setup), rates, len(cells), list(cells["fault"])))
    return panels


def _draw_panel(ax: plt.Axes, panel: HeatmapPanel) -> None:
    """One setup's rates (gray where not evaluated, the % written where > 0), a line between faults
    and under the fault rows, signature names at the top and the bottom, row labels at the left."""
    data = panel.rates.to_numpy(dtype=float)
    cmap = plt.get_cmap("Reds").with_extremes(bad="#e6e6e6")
    ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    for i, j in zip(*np.nonzero(np.nan_to_num(data) > 0)):
        ax.text(j, i, f"{100 * data[i, j]:.0f}", ha="center", va="center", fontsize=6.5,
                color="white" if data[i, j] > 0.6 else "black")
    for j in range(1, data.shape[1]):
        ax.axvline(j - 0.5, color="white", lw=0.8)
    for i in range(1, panel.n_fault_rows):
        if panel.faults[i] != panel.faults[i - 1]:
            ax.axhline(i - 0.5, color="#888888", lw=0.5)
    ax.axhline(panel.n_fault_rows - 0.5, color="black", lw=1.2)
    _top_and_bottom_labels(ax, list(panel.rates.columns))
    ax.set_yticks(range(len(panel.rates)), list(panel.rates.index), fontsize=8)
    ax.set_xlabel("signature", fontsize=9)
    ax.set_ylabel("fault (onset)", fontsize=9)
    ax.set_title(f"{panel.setup}: {panel.n_fault_rows} fault cells, then its healthy runs and controls",
                 fontsize=10, loc="left")


def _top_and_bottom_labels(ax: plt.Axes, names: list[str], fontsize: float = 8) -> None:
    """Column names written slanted at the top and at the bottom of ``ax``."""
    ax.set_xticks(range(len(names)), names, fontsize=fontsize)
    ax.tick_params(axis="x", top=True, labeltop=True, bottom=True, labelbottom=True)
    for tick in ax.xaxis.get_major_ticks():
        tick.label1.set(rotation=60, ha="right", rotation_mode="anchor")
        tick.label2.set(rotation=60, ha="left", rotation_mode="anchor")


def heatmap_figure(panel: HeatmapPanel, command: str = "") -> plt.Figure:
    """One setup's faults x signatures heatmap (:func:`heatmap_panels`), at most
    :data:`HEATMAP_MAX_WIDTH` pixels wide at :data:`HEATMAP_DPI`; ``command`` (the one that
    regenerates it) is written at its top."""
    width = min(LABEL_IN + 1.2 + COL_IN * len(panel.rates.columns), HEATMAP_MAX_WIDTH / HEATMAP_DPI)
    fig, ax = plt.subplots(figsize=(width, ROW_IN * len(panel.rates) + 4.1), layout="constrained")
    _draw_panel(ax, panel)
    title = ("Held-out % of faulty seeds on which each signature fired after the onset "
             "(gray: not evaluated on this setup)")
    fig.suptitle(title + (f"\nregenerate: {command}" if command else ""), fontsize=10)
    return fig


def heatmaps(sigs: pd.DataFrame, out_dir: Path, command: str = "") -> dict[str, str]:
    """Draw every setup's :func:`heatmap_figure` into ``out_dir`` (its size is the figure's: no tight
    cropping) and remove the heatmaps of setups no longer in ``sigs``. Returns {setup: file name}."""
    written = {}
    for panel in heatmap_panels(sigs):
        _save(heatmap_figure(panel, command), out_dir / panel.file, dpi=HEATMAP_DPI)
        written[panel.setup] = panel.file
    for stale in out_dir.glob("heatmap*.png"):
        if stale.name not in written.values():
            stale.unlink()
    return written


def verdict_map_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """Each fault (and parameter set, where a fault has several) against each setup and onset: the
    cell's verdict (``manifested``, ``no trace``, ``changed nothing logged`` for a no-trace cell whose
    every faulty seed logged exactly what its twin did, ``undecided``), empty where the fault was not
    run there. Rows sorted by fault, columns by setup then onset (0 before mid-run)."""
    several = _several_params(cells)
    unchanged = pd.to_numeric(cells.get("n_unchanged", pd.Series(np.nan, index=cells.index)), errors="coerce")
    inert = (unchanged > 0) & (unchanged == pd.to_numeric(cells["n_faulty"], errors="coerce"))
    frame = cells.assign(
        row=[_row_label(c, bool(many)).removesuffix(" (mid-run)") for (_, c), many in zip(cells.iterrows(), several)],
        column=cells["setup"] + np.where(cells["onset_kind"] == "mid", " · mid-run", " · onset 0"),
        verdict=np.where(cells["manifested"].astype(bool), "manifested",
                         np.where(~cells["decidable"].astype(bool), "undecided",
                                  np.where(inert, "changed nothing logged", "no trace"))))
    order = frame.sort_values(["setup", "onset_kind"], key=lambda s: s.map({"mid": 1}).fillna(0)
                              if s.name == "onset_kind" else s)["column"].unique()
    table = frame.pivot_table(index="row", columns="column", values="verdict", aggfunc="first")
    return table.reindex(columns=list(order)).sort_index().fillna("")


def verdict_map_figure(cells: pd.DataFrame, command: str = "") -> plt.Figure:
    """Where each fault manifested (:func:`verdict_map_frame`): a row per fault, a column per setup and
    onset, coloured by verdict, with the counts of each verdict per column at the bottom."""
    table = verdict_map_frame(cells)
    codes = {"": 0, **{v: i + 1 for i, v in enumerate(VERDICT_COLOURS)}}
    data = table.apply(lambda col: col.map(codes)).to_numpy(dtype=float)
    cmap = ListedColormap(["#ffffff", *VERDICT_COLOURS.values()])
    width = min(max(LABEL_IN + 1.5 + 0.42 * len(table.columns), 8.0), HEATMAP_MAX_WIDTH / HEATMAP_DPI)
    fig, ax = plt.subplots(figsize=(width, ROW_IN * len(table) + 4.6), layout="constrained")
    ax.imshow(data, cmap=cmap, vmin=-0.5, vmax=len(codes) - 0.5, aspect="auto", interpolation="nearest")
    for j in range(1, data.shape[1]):
        same_setup = table.columns[j].split(" · ")[0] == table.columns[j - 1].split(" · ")[0]
        ax.axvline(j - 0.5, color="white" if same_setup else "black", lw=0.8 if same_setup else 1.2)
    for i in range(1, data.shape[0]):
        ax.axhline(i - 0.5, color="white", lw=0.5)
    counts = ["/".join(str((table[c] == v).sum()) for v in VERDICT_COLOURS) for c in table.columns]
    _top_and_bottom_labels(ax, [f"{c} ({n})" for c, n in zip(table.columns, counts)])
    ax.set_yticks(range(len(table)), list(table.index), fontsize=8)
    ax.set_ylabel("fault", fontsize=9)
    ax.legend(handles=[Patch(color=c, label=v) for v, c in VERDICT_COLOURS.items()]
              + [Patch(facecolor="white", edgecolor="#888888", label="not run there")],
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    fig.suptitle("Where each fault manifested on held-out seeds, per setup and onset\n(in brackets: "
                 + " / ".join(VERDICT_COLOURS) + " cells)\nchanged nothing logged: no trace, and every faulty "
                 "seed logged exactly what its healthy twin did" + (f"\nregenerate: {command}" if command else ""),
                 fontsize=9)
    return fig


def verdict_map(cells: pd.DataFrame, path: Path, command: str = "") -> None:
    """Draw :func:`verdict_map_figure` and save it (its size is the figure's: no tight cropping)."""
    _save(verdict_map_figure(cells, command), path, dpi=HEATMAP_DPI)


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


def traces(cell: Cell, rs: RunSet, metrics: list[str], path: Path, command: str = "") -> None:
    """Median and interquartile band over seeds, faulty vs healthy, each run aligned on the onset of
    its faulty seed (mid-run onsets differ per seed); ``command`` (the one that regenerates it) is
    written under the title."""
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
                 f"(update {onsets[0] if len(onsets) == 1 else f'{onsets[0]}-{onsets[-1]}'})"
                 + (f"\nregenerate: {command}" if command else ""), fontsize=10)
    fig.supxlabel("updates since the fault's onset", fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def write_all(cells: pd.DataFrame, sigs: pd.DataFrame, metrics: pd.DataFrame, rs: RunSet, out_dir: Path,
              fixed_metrics: tuple[str, ...] = (), commands: tuple[str, str] = ("", "")) -> dict[str, str]:
    """Write every plot of a catalogue (``cells``: a row per cell; ``sigs``, ``metrics``: its signature
    and metric rows, the latter with at least ``cell``, ``name``, ``p_value``) into
    ``out_dir``: the verdict map and the setups' heatmaps (:func:`summary_plots`) and each cell's
    traces; ``commands``: what regenerates the summary plots and the traces, written on each. Returns
    {cell label, 'verdicts' or 'heatmap:<setup>': path relative to the catalogue dir}."""
    written = summary_plots(cells, sigs, out_dir, commands[0])
    for cell in rs.cells():
        chosen = fixed_metrics or trace_metrics(cell, metrics)
        names = [m for m in chosen if m in applicable(cell.info["algo"])]
        name = f"traces_{cell.slug}.png"
        traces(cell, rs, names, out_dir / name, commands[1])
        written[cell.label] = f"plots/{name}"
    return written


def summary_plots(cells: pd.DataFrame, sigs: pd.DataFrame, out_dir: Path, command: str = "") -> dict[str, str]:
    """The verdict map (``verdicts.png``, from ``cells``) and one signature heatmap per setup (from
    ``sigs``), drawn from the catalogue's rows alone (stale heatmaps removed). Returns {'verdicts' or 'heatmap:<setup>': path
    relative to the catalogue dir}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    verdict_map(cells, out_dir / VERDICTS_FILE, command)
    written = {"verdicts": f"plots/{VERDICTS_FILE}"}
    written.update({f"heatmap:{setup}": f"plots/{name}" for setup, name in heatmaps(sigs, out_dir, command).items()})
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
