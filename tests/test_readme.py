"""The README's front door stays true: CI runs its test command, and its commands are valid."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.pipeline.compose import preflight

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in README


def test_readme_install_command_runs_the_main_job():
    assert ("pip install torch==2.13.0 && pip install -e . && python -m harness fault=shared_policy"
            in README)


@pytest.mark.parametrize("line", sorted(set(re.findall(r"\$ python -m harness ([^\n]*)", README))))
def test_readme_example_commands_are_valid_or_fail_as_shown(line):
    args = line.split()
    if "fault=shared_polcy" in args or "fault.clip_range=0" in args:
        with pytest.raises(Exception, match="unknown fault|out of range"):
            preflight(args)
    else:
        preflight(args)


@pytest.mark.parametrize("line", sorted(set(re.findall(r"\$ (python -m harness\.(?:evaluate|diagnose) [^\n]*)", README))))
def test_readme_evaluate_and_diagnose_commands_run(line):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, *line.split()[1:]], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr
