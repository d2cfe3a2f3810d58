"""The README's front door stays true: CI runs its test command, its install line runs the main job,
and it stays short (its examples are checked with the other pages' in tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.pipeline.compose import preflight

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    tests = [line for line in lines if "pytest" in line]
    assert len(tests) == 1 and tests[0] in README
    assert lines[-1] == "bash .ci/wheel"      # then the built wheel, installed in a clean venv, runs every command


def test_readme_install_command_runs_the_main_job():
    assert ("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install -e . "
            "&& python -m harness fault=shared_policy"
            in README)


def test_readme_is_at_most_200_lines():
    assert len(README.split("\n")) <= 200


def test_readme_links_every_docs_page():
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", README))
    assert pages <= linked, f"docs pages the README does not link: {sorted(pages - linked)}"


@pytest.mark.parametrize("line", sorted(set(re.findall(r"\$ python -m harness ([^\n]*)", README))))
def test_readme_example_commands_are_valid(line):
    preflight(line.split())
