"""diagnose's report file (``report=PATH``): per log, the answer and what decided it, with the traces of
the metrics that decided it, as Markdown (figures as PNG files beside it) or as one HTML file (figures
inside it)."""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.invariants import INVARIANTS
from harness.analysis.signatures import SIGNATURES
from harness.config import ConfigError
from harness.store import atomic_write_bytes

FORMATS = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}
MAX_PANELS = 8
PROGRESS = ("reward_mean", "return_mean")


@dataclass
class Entry:
    """One log of the report: its name, and either its frame, answer and printed lines, or why it could not
    be read."""
    name: str
    frame: pd.DataFrame | None = None
    result: Any = None
    fired: tuple[str, ...] = ()
    expected: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    error: str = ""
    logged: tuple[str, ...] = ()       # the canonical metrics the log maps (a logged NaN is still logged)


def check_path(path: str) -> Path:
    """The report's path, its format known from the suffix; ConfigError otherwise."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise ConfigError(f"report={path}: the suffix says the format; valid: {', '.join(FORMATS)}")
    if not p.parent.exists():
        raise ConfigError(f"report={path}: no directory {p.parent}")
    return p


def deciding_metrics(entry: Entry) -> list[str]:
    """The metrics to plot, in order: the learning progress, what each broken invariant reads, the metric of
    each signature that fires, those of the answer's expected signatures; only those the log records."""
    r = entry.result
    wanted = [*PROGRESS]
    for b in r.broken:
        wanted += INVARIANTS[b["invariant"]].reads
    wanted += [SIGNATURES[n].metric for n in (*entry.fired, *entry.expected) if n in SIGNATURES]
    frame = entry.frame
    out = []
    for m in dict.fromkeys(wanted):
        if m in frame and (frame[m].notna().any() or m in entry.logged) and not (m == "return_mean" and "reward_mean" in out):
            out.append(m)
    return out[:MAX_PANELS]


def figure_png(entry: Entry) -> bytes | None:
    """Small multiples of the deciding metrics against the framework's step: non-finite values as red
    crosses on the axis, the first step of each broken invariant that reads a metric as a red line."""
    metrics = deciding_metrics(entry)
    if not metrics:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = entry.frame.reset_index(drop=True)
    # the training step, 1-based, as the invariants count it (their breaks are marked on it)
    x = (pd.to_numeric(frame["update"], errors="coerce") + 1 if "update" in frame
         else pd.Series(np.arange(1, len(frame) + 1)))
    cols = 2 if len(metrics) > 1 else 1
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 2.1 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        y = pd.to_numeric(frame[metric], errors="coerce")
        finite = np.isfinite(y)
        ax.plot(x[finite], y[finite], lw=1.2, color="#1f77b4", marker="o" if finite.sum() <= 30 else None, ms=3)
        # inf, and NaN on a row the reader flagged as non-finite (a NaN elsewhere is a row that does not log it)
        flagged = frame["nonfinite"] == 1 if "nonfinite" in frame else pd.Series(False, index=frame.index)
        bad = ~finite & (y.notna() | (flagged & (metric in entry.logged)))
        if bad.any():
            low = float(y[finite].min()) if finite.any() else 0.0
            ax.scatter(x[bad], [low] * int(bad.sum()), marker="x", color="#d62728", label="non-finite", zorder=3)
            ax.legend(fontsize=7, loc="best")
        for b in entry.result.broken:
            if metric in INVARIANTS[b["invariant"]].reads and b["steps"]:
                ax.axvline(b["steps"][0], color="#d62728", ls=":", lw=1)
        ax.set_title(metric, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("training step", fontsize=8)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _facts(entry: Entry) -> list[str]:
    r = entry.result
    facts = [f"broken invariant: {b['line']}" for b in r.broken]
    facts += [f"{f} is supported by: {'; '.join(why)}" for f, why in r.support.items()]
    return facts


def markdown(path: Path, entries: list[Entry], title: str) -> None:
    lines = [f"# {title}", ""]
    for i, e in enumerate(entries, 1):
        lines += [f"## {e.name}", ""]
        if e.error:
            lines += [f"Could not be read: {e.error}", ""]
            continue
        lines += [f"**{e.lines[0] if e.lines else e.result.answer}**", ""]
        lines += [f"- {f}" for f in _facts(e)] + ([""] if _facts(e) else [])
        png = figure_png(e)
        if png is not None:
            image = path.with_name(f"{path.stem}-{i}.png")
            atomic_write_bytes(image, png)
            lines += [f"![the metrics that decided the answer]({image.name})", ""]
        lines += ["<details><summary>the whole answer</summary>", "", "```text", *e.lines[1:], "```", "",
                  "</details>", ""]
    atomic_write_bytes(path, "\n".join(lines).encode())


def as_html(path: Path, entries: list[Entry], title: str) -> None:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto} pre{background:#f6f6f6;padding:1em;"
           "overflow-x:auto;font-size:85%}</style></head><body>", f"<h1>{html.escape(title)}</h1>"]
    for e in entries:
        out.append(f"<h2>{html.escape(e.name)}</h2>")
        if e.error:
            out.append(f"<p>Could not be read: {html.escape(e.error)}</p>")
            continue
        out.append(f"<p><b>{html.escape(e.lines[0] if e.lines else e.result.answer)}</b></p>")
        if _facts(e):
            out.append("<ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in _facts(e)) + "</ul>")
        png = figure_png(e)
        if png is not None:
            out.append(f"<img alt='the metrics that decided the answer' src='data:image/png;base64,"
                       f"{base64.b64encode(png).decode()}'>")
        out.append("<details><summary>the whole answer</summary><pre>" + html.escape("\n".join(e.lines[1:]))
                   + "</pre></details>")
    out.append("</body></html>")
    atomic_write_bytes(path, "\n".join(out).encode())


def write(path: Path, entries: list[Entry], title: str) -> None:
    """The report in the format its suffix names (:data:`FORMATS`)."""
    (markdown if FORMATS[path.suffix.lower()] == "markdown" else as_html)(path, entries, title)
