"""An installable package: console scripts, the Hydra configs and the published diagnosis model as
package data, the model copy kept equal to results/catalogue/model/, and the built wheel, installed in a
clean venv, runs every command from an empty directory (.ci/wheel, run by the slow tier)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import joblib
import pandas as pd
import pytest
import sklearn

from harness.analysis.features import FEATURE_VERSION
from harness.config import CONF_DIR, ConfigError
from harness.detection.diagnosis import MODEL_FILE, PACKAGED_MODEL, find_model, model_path
from tests.paths import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RESULTS_MODEL = ROOT / "results" / "catalogue" / "model"
SCRIPTS = {"rlfh": "harness.commands.run:main", "rlfh-diagnose": "harness.commands.diagnose:main",
           "rlfh-evaluate": "harness.commands.evaluate:main", "rlfh-export": "harness.commands.export:main",
           "rlfh-catalogue": "harness.commands.catalogue:main", "rlfh-watch": "harness.commands.watch:main"}


def test_console_scripts_are_the_commands():
    assert PYPROJECT["project"]["scripts"] == SCRIPTS
    for target in SCRIPTS.values():
        module, _, name = target.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), target


def test_configs_and_model_are_package_data():
    assert CONF_DIR == ROOT / "harness" / "conf" and (CONF_DIR / "config.yaml").exists()
    assert not (ROOT / "conf").exists(), "conf/ moved into the package: harness/conf/"
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["harness"]
    shipped = {p for pattern in patterns for p in (ROOT / "harness").glob(pattern)}
    wanted = {p for p in CONF_DIR.rglob("*") if p.is_file()} | {PACKAGED_MODEL, PACKAGED_MODEL.with_name("model_card.json"),
                                                                 PACKAGED_MODEL.with_name("directions.json")}
    wanted |= {p for d in ("selftest", "regression") for p in (ROOT / "harness" / "data" / d).rglob("*") if p.is_file()}
    assert wanted <= shipped, sorted(str(p) for p in wanted - shipped)
    assert PACKAGED_MODEL == ROOT / "harness" / "data" / "model" / "diagnosis.joblib" and PACKAGED_MODEL.exists()


@pytest.mark.parametrize("name", ["diagnosis.joblib", "model_card.json", "directions.json"])
def test_packaged_model_is_the_published_one(name):
    """The package ships results/catalogue/model/ as it is: refresh it with python -m harness.catalogue
    publish=true (or publish=only) after rebuilding the model."""
    published = RESULTS_MODEL / name
    if not published.exists():
        pytest.skip(f"no {published} in this checkout")
    assert (PACKAGED_MODEL.parent / name).read_bytes() == published.read_bytes(), (
        f"harness/data/model/{name} differs from results/catalogue/model/{name}: python -m harness.catalogue "
        "publish=only")


def test_diagnose_reads_the_results_dir_model_else_the_packaged_one(tmp_path):
    assert find_model(tmp_path) == PACKAGED_MODEL                     # nothing built there
    own = tmp_path / "catalogue" / MODEL_FILE
    own.parent.mkdir(parents=True)
    own.write_bytes(b"")
    assert find_model(tmp_path) == own
    assert find_model(tmp_path / "elsewhere", catalogue=tmp_path / "catalogue") == model_path(tmp_path / "catalogue")
    assert find_model("x", catalogue=own) == own


def _bundle(path: Path, feature_version: int = FEATURE_VERSION) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump({"sklearn": sklearn.__version__, "feature_version": feature_version, "models": {}}, path)
    path.with_name("model_card.json").write_text('{"models": {}}\n')


def test_publish_copies_a_readable_model_into_the_package(tmp_path, monkeypatch):
    from harness.commands import catalogue

    monkeypatch.setattr(catalogue, "PACKAGED_MODEL", tmp_path / "package" / "model" / "diagnosis.joblib")
    source = tmp_path / "r" / "catalogue" / MODEL_FILE
    _bundle(source)
    written = catalogue.publish(tmp_path / "r")
    assert [p.name for p in written] == ["diagnosis.joblib", "model_card.json"]     # no catalogue: no directions
    for p in written:
        assert p.read_bytes() == (source.parent / p.name).read_bytes()
    pd.DataFrame([{"kind": "metric", "onset_kind": "0", "algo": "ppo", "fault": "f", "setup": "ppo/x/native",
                   "name": "entropy", "auroc": 0.0}]).to_parquet(source.parent.parent / "catalogue.parquet")
    written = catalogue.publish(tmp_path / "r")            # directions written from the catalogue, then shipped
    assert [p.name for p in written] == ["diagnosis.joblib", "model_card.json", "directions.json"]
    assert json.loads(written[-1].read_text()) == {"ppo": {"f": {"ppo/x/native": {"entropy": -1.0}}}}
    _bundle(source, feature_version=FEATURE_VERSION - 1)               # a stale model is not shipped
    with pytest.raises(ConfigError, match="rebuild it"):
        catalogue.publish(tmp_path / "r")
    with pytest.raises(ConfigError, match="no diagnosis model"):
        catalogue.publish(tmp_path / "empty")


@pytest.mark.slow
def test_the_built_wheel_runs_every_command_from_an_empty_directory():
    """.ci/wheel builds the wheel, installs it (not editable) with torch into a fresh venv, and runs every
    console script and ``python -m harness`` from an empty directory outside the checkout (a short job and
    its twin, the catalogue of them, evaluate, export, diagnose with the model shipped in the wheel, watch).
    It runs as CI runs it: this interpreter's ``python3`` (with pip) first on PATH, and no PYTHONPATH, so the
    commands import the installed wheel and not this checkout. About 2 CPU-minutes; installing the
    dependencies into the venv makes its wall time several minutes."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    out = subprocess.run(["bash", ".ci/wheel"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    assert "wheel: every command ran from" in out.stdout


def test_the_version_is_written_once():
    """pyproject.toml reads the version from harness.__version__; the installed metadata says the same."""
    import importlib.metadata

    import harness

    assert "version" in PYPROJECT["project"]["dynamic"] and "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "harness.__version__"}
    assert importlib.metadata.version("rl-fault-harness") == harness.__version__
