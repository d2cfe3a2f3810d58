"""The catalogue as a person reads it, re-rendered from the published parquet files alone
(``python -m harness.catalogue render=only``): a short summary page, one page per fault, links that
resolve, a verdict map and a heatmap per setup that fit a screen with labels on both axes, and the
command that regenerates each page and figure at its top. No run is trained or read.

Rendering the published catalogue (49 faults, 374 cells, a heatmap per setup) takes 20-30 CPU-seconds: the tests
that read what it wrote are slow (once per session, whichever worker asks first); the fast tier renders the tiny
catalogue fixture from the command line and checks the published tables' verdict map and heatmap rows in memory."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from faults import FAULTS
from harness.analysis import plots
from harness.catalogue.build import render
from harness.catalogue.report import commands, verdict
from harness.catalogue.rows import CatalogueTables
from tests.commands import run
from tests.paths import ROOT

PUBLISHED = ROOT / "results" / "catalogue"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")

pytestmark = pytest.mark.skipif(not (PUBLISHED / "catalogue.parquet").exists(),
                                reason="no published catalogue (results/catalogue/catalogue.parquet)")


def copy_published(target: Path) -> Path:
    """The published catalogue's parquet files and trace plots (not its pages, not its summary plots) under
    ``target/catalogue``; returns ``target``."""
    out = target / "catalogue"
    (out / "plots").mkdir(parents=True)
    (out / "model").mkdir()
    for path in PUBLISHED.glob("*.parquet"):
        shutil.copy(path, out / path.name)
    if (PUBLISHED / "model" / "scores.parquet").exists():
        shutil.copy(PUBLISHED / "model" / "scores.parquet", out / "model" / "scores.parquet")
    for path in (PUBLISHED / "plots").glob("traces_*.png"):
        shutil.copy(path, out / "plots" / path.name)
    return target


@pytest.fixture(scope="session")
def rendered(once_per_session) -> tuple[Path, dict[str, Path]]:
    """The published catalogue's parquet files rendered (a stale fault page beside them), once per session:
    read it."""
    def make(target: Path) -> dict[str, str]:
        root = copy_published(target / "results")
        (root / "catalogue" / "faults").mkdir()
        (root / "catalogue" / "faults" / "no_longer_there.md").write_text("# stale\n")
        return {key: str(path) for key, path in render(root).items()}

    target, written = once_per_session("published-render", make)
    return target / "results" / "catalogue", {key: Path(path) for key, path in written.items()}


@pytest.fixture(scope="module")
def tables() -> CatalogueTables:
    return CatalogueTables.of(pd.read_parquet(PUBLISHED / "catalogue.parquet"))


def pages(out: Path) -> list[Path]:
    return [out / "CATALOGUE.md", out / "FAULTS.md", *sorted((out / "faults").glob("*.md"))]


@pytest.mark.slow
def test_render_only_writes_a_short_summary_and_a_page_per_fault(rendered, tables):
    out, written = rendered
    setups = sorted(tables.cells["setup"].unique())
    assert {"verdicts", *(f"heatmap:{s}" for s in setups), "markdown", "faults", "pages"} <= set(written)
    summary = (out / "CATALOGUE.md").read_text()
    assert len(summary.splitlines()) < 450         # 49 faults (412 lines at 2026-11-25); each fault's rows live on its page
    faults = sorted(tables.cells["fault"].unique())
    assert sorted(p.stem for p in (out / "faults").glob("*.md")) == faults     # the stale page is gone
    # the sections the summary keeps, each fault's row linked to its page, the command at the top
    for section in ("## Summary", "### Faults that left no trace", "### Per framework view",
                    "## Diagnosis model (out of sample)", "## Across implementations", "## Healthy baselines"):
        assert section in summary, section
    assert "Even seeds calibrate, odd seeds are held\nout" in summary
    assert commands(str(out.parent))[1] in "\n".join(summary.splitlines()[:12])
    assert (out / "plots" / plots.VERDICTS_FILE).stat().st_size > 10_000
    for fault in faults:
        assert f"| [{fault}](faults/{fault}.md) |" in summary, fault
    # every cell's verdict is on the summary, a "no trace" one names the setup it holds on
    for _, c in tables.cells.iterrows():
        text = verdict(c, tables.signatures, tables.metrics)
        assert text in summary, c["cell"]
        if c["decidable"] and not c["manifested"]:
            assert f"**no trace** on {c['setup']}" in text
        elif not c["decidable"] and not c["manifested"]:
            assert f"undecided ({c['n_faulty']} seeds" in text


@pytest.mark.slow
def test_the_summary_gives_each_views_verdicts_in_brief(rendered, tables):
    """The summary's per-view section is a row per setup and view (decided cells manifested, and the cells
    whose verdict there differs from the canonical metrics'), not a row per cell: each count and each
    cell a view loses is checked against views.parquet."""
    out, _ = rendered
    summary = (out / "CATALOGUE.md").read_text()
    section = summary.split("### Per framework view", 1)[1].split("\n## ", 1)[0]
    views = pd.read_parquet(PUBLISHED / "views.parquet").merge(tables.cells[["cell", "setup", "decidable"]], on="cell")
    views = views[views["decidable"].astype(bool)]
    canonical = views[views["view"] == "canonical"].set_index("cell")["manifested"]
    rows = 0
    for (setup, view), group in views.groupby(["setup", "view"]):
        line = next(x for x in section.splitlines() if x.startswith(f"| {setup} | {view} | "))
        assert line.startswith(f"| {setup} | {view} | {int(group['manifested'].sum())} of {len(group)} |"), line
        lost = group[~group["manifested"].astype(bool) & group["cell"].map(canonical).eq(True)]
        for cell in lost["cell"] if view != "canonical" else []:
            assert cell.rsplit(" | ", 1)[0] in line.split(" | ")[3], (cell, line)
        rows += 1
    assert rows == len([x for x in section.splitlines() if x.startswith("| ") and not x.startswith("| setup")])
    assert rows < 40 and "\\|" not in section       # one row per setup and view, no cell rows


@pytest.mark.slow
def test_each_fault_page_has_mechanism_provenance_cells_views_and_traces(rendered, tables):
    out, _ = rendered
    views = pd.read_parquet(PUBLISHED / "views.parquet")
    render_command = commands(str(out.parent))[1]
    for fault, cells in tables.cells.groupby("fault"):
        page = (out / "faults" / f"{fault}.md").read_text()
        assert page.startswith(f"# {fault}\n") and render_command in "\n".join(page.splitlines()[:4])
        assert "## Mechanism" in page and "## Verdicts" in page
        cls = FAULTS.get(fault)
        if cls is not None:
            assert f"- **Provenance**: {cls.provenance}" in page and cls.description in page
        for _, c in cells.iterrows():
            assert f"\n## {c['cell']}\n" in page
            assert verdict(c, tables.signatures, tables.metrics) in page
        if views["cell"].isin(cells["cell"]).any():
            assert "## Per framework view" in page
        assert page.count("![traces](../plots/traces_") == len(cells)
    # held-out rates with their intervals, as the cell section gives them
    shared = (out / "faults" / "shared_policy.md").read_text()
    assert "| ratio_pinned | 0.9 | 100% [57%, 100%] | 0% [0%, 43%] | 100% [57%, 100%] | not specific" in shared
    assert "Healthy controls that mimic it: ratio_pinned (100%)" in shared


@pytest.mark.slow
def test_every_link_of_every_page_resolves(rendered, tables):
    out, _ = rendered
    checked = 0
    for page in pages(out):
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "#")):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            assert path.is_file(), f"{page.relative_to(out)} links to {target}, which does not exist"
            checked += 1
    assert checked > 200
    summary = (out / "CATALOGUE.md").read_text()
    assert "![where each fault manifested, per setup and onset](plots/verdicts.png)" in summary
    assert all(f"[{s}](plots/{plots.heatmap_file(s)})" in summary for s in tables.cells["setup"].unique())


@pytest.mark.slow
def test_a_heatmap_per_setup_fits_a_screen_with_labels_on_both_axes(rendered, tables):
    out, _ = rendered
    command = commands("results")[1]
    panels = plots.heatmap_panels(tables.signatures)
    assert [p.setup for p in panels] == sorted(tables.cells["setup"].unique())
    assert sorted(p.name for p in (out / "plots").glob("heatmap*.png")) == sorted(p.file for p in panels)
    for panel in panels:
        cells = tables.cells[tables.cells["setup"] == panel.setup]
        assert panel.n_fault_rows == len(cells) and len(panel.rates) > len(cells)   # + healthy / controls
        fig = plots.heatmap_figure(panel, command)
        try:
            width, height = fig.get_size_inches() * plots.HEATMAP_DPI
            assert width <= plots.HEATMAP_MAX_WIDTH
            assert command in fig.get_suptitle().splitlines()[-1]
            (ax,) = fig.get_axes()
            assert ax.get_title(loc="left").startswith(f"{panel.setup}: {len(cells)} fault cells")
            ticks = ax.xaxis.get_major_ticks()
            assert [t.label1.get_text() for t in ticks] == list(panel.rates.columns)
            assert all(t.label1.get_visible() and t.label2.get_visible() for t in ticks)     # bottom and top
            assert all(t.label2.get_text() == t.label1.get_text() for t in ticks)
            rows = [t.get_text() for t in ax.get_yticklabels()]
            assert rows == list(panel.rates.index) and all(rows)
            assert {r.split(" ")[0] for r in rows[:len(cells)]} == set(cells["fault"])
            assert ax.get_xlabel() and ax.get_ylabel()
        finally:
            plots.plt.close(fig)
        # the saved file is the figure's size (no cropping)
        assert Image.open(out / "plots" / panel.file).size == (round(width), round(height))


def test_the_verdict_map_has_every_cell_s_verdict_where_it_was_run(tables):
    cells = tables.cells
    table = plots.verdict_map_frame(cells)
    # a column per setup and onset kind, onset 0 first within a setup; a row per fault (parameter set)
    expected = [f"{s} · {'onset 0' if k == '0' else 'mid-run'}"
                for s in sorted(cells["setup"].unique())
                for k in ("0", "mid") if ((cells["setup"] == s) & (cells["onset_kind"] == k)).any()]
    assert list(table.columns) == expected
    assert table.index.is_monotonic_increasing and {r.split(" ")[0] for r in table.index} == set(cells["fault"])
    filled = table.to_numpy() != ""
    assert filled.sum() == len(cells)                       # one entry per cell, blank where not run
    for _, c in cells.iterrows():
        column = f"{c['setup']} · {'mid-run' if c['onset_kind'] == 'mid' else 'onset 0'}"
        entries = table[column][table[column] != ""]
        mine = [r for r in entries.index if r.split(" ")[0] == c["fault"]]
        inert = c["n_unchanged"] == c["n_faulty"] > 0              # every faulty seed logged what its twin did
        want = ("manifested" if c["manifested"] else "undecided" if not c["decidable"]
                else "changed nothing logged" if inert else "no trace")
        assert want in set(entries[mine]), (c["cell"], want)
    # the published catalogue has such cells (Hopper never reaches its step cap: truncation_as_termination)
    assert (table == "changed nothing logged").to_numpy().sum() == (
        ~cells["manifested"].astype(bool) & cells["decidable"].astype(bool)
        & (cells["n_unchanged"] == cells["n_faulty"])).sum() > 0
    fig = plots.verdict_map_figure(cells, "regen")
    try:
        (ax, *_) = fig.get_axes()
        labels = [t.get_text() for t in ax.get_xticklabels()]
        for label, column in zip(labels, table.columns):    # a count per verdict
            counts = [int(n) for n in label.removeprefix(column).strip(" ()").split("/")]
            assert counts == [int((table[column] == v).sum()) for v in plots.VERDICT_COLOURS]
        assert [t.get_text() for t in ax.get_yticklabels()] == list(table.index)
    finally:
        plots.plt.close(fig)


def test_a_fault_with_two_parameter_sets_has_two_heatmap_rows(tables):
    sigs = tables.signatures[tables.signatures["fault"] == "zero_reward"]
    other = sigs.assign(fault_params='{"scale": 2}', cell=sigs["cell"] + " x")
    both = pd.concat([sigs, other])
    for panel in plots.heatmap_panels(both):
        labels = list(panel.rates.index[:panel.n_fault_rows])
        assert len(labels) == len(set(labels)) == 2 * sigs.loc[sigs["setup"] == panel.setup, "cell"].nunique()
        assert any("scale=2" in label for label in labels)
    rows = plots.verdict_map_frame(both.drop_duplicates("cell")).index
    assert len(rows) == 2 and any("scale=2" in r for r in rows)


def test_render_only_on_the_command_line(tiny_copy):
    """render=only from the command line: the pages, the summary plots and the faults' directions diagnose's
    reference=PATH ranks by (model/directions.json) are written from the parquet files, and no run is read
    although the runs are there: the trace plots, which need the runs, are kept as they were (the tiny catalogue
    fixture, its pages removed)."""
    root = tiny_copy("catalogue")
    shutil.rmtree(root / "catalogue" / "faults")
    for path in [root / "catalogue" / "CATALOGUE.md", root / "catalogue" / "model" / "directions.json",
                 *(root / "catalogue" / "plots").glob("[hv]*.png")]:
        path.unlink()
    traces = {p.name: p.read_bytes() for p in (root / "catalogue" / "plots").glob("traces_*.png")}
    out = run("harness.catalogue", f"results_dir={root}", "render=only", cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert f"wrote {root}/catalogue/CATALOGUE.md" in out.stdout and "reading" not in out.stdout
    assert (root / "catalogue" / "plots" / "verdicts.png").exists() and (root / "catalogue" / "faults").is_dir()
    assert (root / "catalogue" / "CATALOGUE.md").exists() and (root / "catalogue" / "model" / "directions.json").exists()
    assert traces and {p.name: p.read_bytes() for p in (root / "catalogue" / "plots").glob("traces_*.png")} == traces


@pytest.mark.parametrize("args, message", [
    (["results_dir={empty}", "render=only"], "no catalogue under {empty}/catalogue (no catalogue.parquet): build it "
                                             "from the runs first (python -m harness.catalogue results_dir={empty})"),
    (["render=true"], "render=True; valid choices: false (build from the runs), only"),
    (["render=only", "publish=only"], "render=only and publish= both given"),
])
def test_bad_render_arguments_are_one_line(args, message, tmp_path):
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    out = run("harness.catalogue", *[a.format(empty=empty) for a in args], cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message.format(empty=empty) in lines[0]
