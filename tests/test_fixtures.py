"""The checked-in fixtures under tests/data/tiny/ are what ``python -m tests.make_fixtures`` makes today.

Fast: each fixture is of this training version, holds exactly the runs of its plan (the run ids today's code
gives its overrides and its sweep's sampler plans), every run's files match their checksums, and its
manifest records the script's plan. With ``tests/agents/test_pinned_metrics.py`` (a change to the
training code's numbers must bump ``harness.TRAINING_VERSION``, which changes every run id), that means the
stored runs are the ones the script would train. Slow: the catalogue, dataset and diagnosis model built again
from the stored runs are the checked-in ones.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import TRAINING_VERSION
from harness.store import RunStore
from tests.commands import working_dir
from tests.make_fixtures import FIXTURES, MANIFEST, TINY, build, planned_runs, sweep_summary

REMAKE = "make them again with python -m tests.make_fixtures"
#: files holding the fitted model's held-out scores: their values depend on the machine's float kernels (a
#: logistic fit on a few runs, one flipped answer moves a rate by 20 points), so they are compared exactly
#: only where the fixture's manifest records this machine's numerics (tests/agents/test_pinned_metrics.py)
FITTED = frozenset({"catalogue/CATALOGUE.md", "catalogue/model/model_card.json", "catalogue/model/scores.parquet",
                    "catalogue/model/heldout.parquet"})


def same_numerics(root: Path) -> bool:
    """Whether the fixture at ``root`` was made on a machine whose float kernels are this one's."""
    from tests.agents.test_pinned_metrics import numerics

    return json.loads((root / MANIFEST).read_text()).get("numerics") == numerics()


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_a_fixture_is_of_this_training_version_and_its_files_are_whole(name):
    root = TINY / name
    manifest = json.loads((root / MANIFEST).read_text())
    assert manifest["training_version"] == TRAINING_VERSION, f"{name}: made at training version " \
        f"{manifest['training_version']}, the code is at {TRAINING_VERSION}: {REMAKE}"
    assert manifest["plan"] == FIXTURES[name].plan(), f"{name}: tests/make_fixtures.py's plan changed: {REMAKE}"
    store = RunStore(root)
    stored = sorted(m["run_id"] for m in store.iter_metas())
    assert stored == manifest["runs"]
    for rid in stored:
        assert store.problem(rid) is None, f"{name}/{rid}: {store.problem(rid)}"
        assert store.load_meta(rid)["versions"]["training"] == TRAINING_VERSION
    for built in ("catalogue/catalogue.parquet", "dataset/runs.parquet"):
        assert (root / built).exists(), f"{name}: no {built}: {REMAKE}"
    assert not any((root / part).exists() for part in ("checkpoints", "locks", ".multirun"))


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_a_fixture_holds_exactly_the_runs_of_its_plan(name, tiny_copy):
    """Today's code gives the plan's overrides the stored run ids, and the fixture's sweep, run again, finds
    every run it plans already stored (so it trains nothing); no other run is stored."""
    fixture = FIXTURES[name]
    root = tiny_copy(name)
    stored = {m["run_id"] for m in RunStore(root).iter_metas()}
    explicit = planned_runs(fixture, root)
    assert explicit <= stored, f"{name}: runs of the plan not stored: {sorted(explicit - stored)}: {REMAKE}"
    swept = 0
    for line in sweep_summary(fixture, root, "hydra/launcher=basic"):
        planned, already, todo = map(int, re.search(r": (\d+) .*?runs.*?, (\d+) already stored .*?, (\d+) to train", line)
                                     .groups())
        assert todo == 0 and already == planned, f"{name}: {line}: {REMAKE}"
        swept += planned
    assert len(stored) == len(explicit) + swept, f"{name}: {len(stored)} runs stored, the plan has " \
        f"{len(explicit) + swept}: {REMAKE}"


#: what a build writes that says when, by which commit or how long, not what
VOLATILE = ("built", "code", "seconds", "wall_s", "created")


def _stable(value):
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _text(path: Path) -> str:
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d( UTC)?", "<time>", path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_building_a_fixture_s_runs_again_gives_its_catalogue_dataset_and_model(name, tmp_path):
    """The build from the checked-in runs, made again by today's code, writes the checked-in tables,
    pages, model card and held-out answers (plots are pictures: only their names are compared)."""
    source = TINY / name
    root = tmp_path / name
    shutil.copytree(source / "runs", root / "runs")
    with working_dir(tmp_path):
        build(FIXTURES[name], Path(name))
    for path in sorted(p for p in source.rglob("*") if p.is_file() and "runs" not in p.relative_to(source).parts[:1]):
        rel = path.relative_to(source)
        if rel.name == MANIFEST or (rel.as_posix() in FITTED and not same_numerics(source)):
            continue
        again = root / rel
        assert again.exists(), f"{name}: the build no longer writes {rel}: {REMAKE}"
        if path.suffix == ".parquet":
            pd.testing.assert_frame_equal(pd.read_parquet(again), pd.read_parquet(path), obj=f"{name}/{rel}")
        elif path.suffix == ".json":
            assert _stable(json.loads(again.read_text())) == _stable(json.loads(path.read_text())), f"{name}/{rel}: {REMAKE}"
        elif path.suffix == ".md":
            assert _text(again) == _text(path), f"{name}/{rel}: {REMAKE}"
    written = {p.relative_to(root) for p in root.rglob("*") if p.is_file()} - {
        p.relative_to(source) for p in source.rglob("*") if p.is_file()}
    assert not {p for p in written if p.parts[0] not in ("runs", "checkpoints", "locks")}, \
        f"{name}: the build writes files the fixture lacks: {REMAKE}"
