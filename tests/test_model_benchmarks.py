"""The model benchmarks' inputs: a build's examples table and card (--examples) without any run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.model_examples import arguments, examples_and_settings
from harness.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def test_examples_and_settings_read_a_builds_table_and_card(tmp_path: Path) -> None:
    table = tmp_path / "examples.parquet"
    pd.DataFrame({"run_id": ["a", "a", "b"], "view": "sb3", "label": ["healthy", "healthy", "tiny_clip"],
                  "algo": "ppo", "prefix": [0.3, 1.0, 1.0]}).to_parquet(table)
    (tmp_path / "model_card.json").write_text(json.dumps({"settings": {"tiny_clip": ["clip_range"]},
                                                          "examples_version": "x"}))
    args = arguments("t").parse_args(["--examples", str(table)])
    examples, settings = examples_and_settings(args)
    assert len(examples) == 3 and examples["testable"].all()       # no column: every run is a diverse one
    assert settings == {"tiny_clip": ("clip_range",)}


def test_examples_a_missing_or_card_less_table_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        examples_and_settings(arguments("t").parse_args(["--examples", str(tmp_path / "nope.parquet")]))
    table = tmp_path / "examples.parquet"
    pd.DataFrame({"run_id": ["a"], "view": "sb3", "label": "healthy", "algo": "ppo", "prefix": 1.0}).to_parquet(table)
    with pytest.raises(ConfigError, match="no model_card.json beside it"):
        examples_and_settings(arguments("t").parse_args(["--examples", str(table)]))


def test_the_published_examples_feed_the_benchmarks() -> None:
    """The shipped table and card are what --examples reads (the figures in docs/benchmarks.md)."""
    table = ROOT / "results" / "catalogue" / "model" / "examples.parquet"
    out = subprocess.run([sys.executable, "-c", "from benchmarks.model_examples import arguments, "
                          "examples_and_settings; e, s = examples_and_settings(arguments('t').parse_args("
                          f"['--examples', '{table}'])); print(len(e), len(s))"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    n_examples, n_settings = map(int, out.stdout.split()[-2:])
    assert n_examples > 10000 and n_settings > 20


@pytest.mark.parametrize("script", ["answer_rules", "feature_families", "model_kinds"])
def test_a_bad_examples_path_ends_the_benchmark_with_one_error_line(script: str, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, f"benchmarks/{script}.py", "--examples", str(tmp_path / "nope.parquet")],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--examples " in errors[0] and "no such file" in errors[0], out.stderr
