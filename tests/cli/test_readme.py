"""The README's front door stays true: CI runs its test command and then the slow tier (which builds and
runs the wheel), its install line runs the main job, and it stays short (its examples are checked with the
other pages' in tests/cli/test_docs.py)."""

from __future__ import annotations

import re

from tests.cli import test_package
from tests.paths import ROOT

README = (ROOT / "README.md").read_text()
#: what the slow tier adds to the README's test command
SLOW = " -m slow"
WHEEL_TEST = test_package.test_the_built_wheel_runs_every_command_from_an_empty_directory


def _ci_commands() -> list[str]:
    """The lines .ci/run runs (comments and blank lines left out)."""
    lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_the_readme_test_command_then_the_slow_tier():
    """.ci/run runs the README's test line verbatim (its install line, then from ruff on: lint and the fast
    tier; on one line or split there), then the slow tier the README shows: the README's test command with
    ``-m slow``. The slow tier holds the wheel check, so .ci/run does not run .ci/wheel itself."""
    commands = _ci_commands()
    tests = [line for line in commands if "pytest" in line]
    assert len(tests) == 2, tests
    fast, slow = tests
    readme_lines = README.split("\n")
    shown = [line for line in readme_lines if line == fast or line.endswith(f" && {fast}")]
    assert len(shown) == 1, f"the README shows no line ending in .ci/run's test line: {fast}"
    install = shown[0][: -len(fast)].removesuffix(" && ")
    assert not install or install in commands[: commands.index(fast)], (
        f"CI does not run the README's install part before its tests: {install}")
    command = fast.rsplit("&&", 1)[-1].strip()              # the test command, after install and lint
    assert command.startswith("HF_HUB_OFFLINE=1 python -m pytest"), command
    assert " -m " not in command.split("pytest", 1)[1], f"the README's tests are the default (fast) tier: {command}"
    assert slow == command + SLOW, f"the slow tier should be the README's test command with{SLOW}: {slow}"
    assert slow in readme_lines, "the README does not show the slow tier's command"
    assert commands.index(fast) < commands.index(slow)
    assert not [line for line in commands if ".ci/wheel" in line], "the slow tier runs .ci/wheel (tests/cli/test_package.py)"
    assert any(m.name == "slow" for m in getattr(WHEEL_TEST, "pytestmark", [])), "the wheel check is in the slow tier"


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
