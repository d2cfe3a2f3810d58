"""The README's front door stays true: CI runs its test command and then the slow tier (which builds and
runs the wheel), its install line runs the main job, and it stays short (its examples are checked with the
other pages' in tests/cli/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli import test_package
from tests.cli.test_docs import Block, blocks
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


#: a number as prose quotes it (30.19, 500, 33,810, 1e-6, 3x, 90%), not a digit inside a name (SB3, k3, s0,
#: Hopper-v5) or a reference (unsloth#1761)
NUMBER = re.compile(r"(?<![\w.#])\d+(?:,\d{3})*(?:\.\d+)*(?:e-?\d+)?(?:x\b)?(?![\w.]*\w)")


def _numbers(text: str) -> set[str]:
    """The numbers a text quotes, thousands separators dropped (link targets are not text)."""
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return {m.group(0).removesuffix("x").replace(",", "") for m in NUMBER.finditer(text)}


def prose_after_output_blocks(page: Path) -> list[tuple[Block, str]]:
    """Each output block of the page (as tests/cli/test_docs.py classifies them) with the prose right after
    it: the paragraphs up to the next heading, fenced block or HTML comment."""
    lines = page.read_text().split("\n")
    out = []
    for block in blocks(page):
        if not block.is_output:
            continue
        end = block.line                      # 0-based index of the first line inside the block
        while lines[end].strip() != "```":
            end += 1
        prose = []
        for line in lines[end + 1:]:
            if line.lstrip().startswith(("#", "```", "<!--")):
                break
            prose.append(line)
        out.append((block, "\n".join(prose)))
    return out


def test_the_numbers_the_readme_quotes_under_an_output_block_are_in_that_block():
    """Prose that explains an output block quotes its numbers from it (not from an older run: "return 62
    against the twin's 498" under a block showing 30.19 vs 500)."""
    checked = 0
    for block, prose in prose_after_output_blocks(ROOT / "README.md"):
        quoted, shown = _numbers(prose), _numbers(block.text)
        assert quoted <= shown, (f"README.md: the prose after the output block at line {block.line} quotes "
                                 f"{sorted(quoted - shown)}, which the block does not show")
        checked += len(quoted)
    assert checked, "the README explains no output block with numbers: this test checks nothing"


def test_the_number_check_catches_a_figure_the_block_does_not_show(tmp_path):
    page = tmp_path / "README.md"
    page.write_text("<!-- output of: python -m harness fault=shared_policy -->\n```text\n"
                    "│ return_mean, last 5 updates │ 30.19 │ 500 │\n│ param_delta │ 1.361 │ 0.7366 │\n```\n\n"
                    "Its return over the last 5 updates is 62, against the twin's 498 (SB3, k3, unsloth#1761).\n\n"
                    "A second paragraph: 33,810 steps/s, 1.76x.\n\n## Next\n\nNot read: 7.\n")
    [(block, prose)] = prose_after_output_blocks(page)
    assert _numbers(prose) == {"5", "62", "498", "33810", "1.76"}
    assert _numbers(prose) - _numbers(block.text) == {"62", "498", "33810", "1.76"}
