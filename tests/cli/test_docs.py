"""The documentation stays true of the code (README.md and docs/*.md).

- every relative link resolves to a file in the repository, and no page cites a path outside it;
- every ``python -m harness...`` command line in the pages composes (``preflight``, as the commands
  themselves validate a command line before running);
- every output block carries a marker naming the command that produced it, on the line before it:
  ``<!-- output of: COMMAND -->``; figures still to be produced are a ``<!-- to be regenerated:
  COMMAND -->`` line instead of a block;
- the output of cheap commands (``python -m harness.diagnose``, ``--help``, and error examples: no
  training) is produced again (in-process: tests.commands.run) and compared with its block, timings and
  absolute paths normalised;
- run ids shown anywhere are the ones the current code gives for the training commands shown
  (``make_experiment(args).key()`` -> ``run_id``, and the healthy twin's), so a change to run identity
  (``harness.TRAINING_VERSION``, a fault's ``version``) cannot leave stale ids behind;
- every test file a page names (``tests/.../test_x.py``) exists.

``python -m tests.cli.test_docs`` rewrites the cheap blocks from the commands' current output.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import warnings
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from harness.config import ConfigError
from harness.pipeline.compose import make_experiment, preflight
from harness.pipeline.train import healthy_twin
from harness.store import run_id
from tests.commands import run
from tests.paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINKED = [*PAGES, ROOT / "results" / "README.md", ROOT / "benchmarks" / "realworld" / "README.md"]
COMMANDS = {"harness": "config", "harness.diagnose": "diagnose", "harness.evaluate": "evaluate",
            "harness.export": "export", "harness.catalogue": "catalogue", "harness.watch": "watch"}
MARKER = re.compile(r"<!-- output of: (.+?) -->")
PLACEHOLDER = re.compile(r"<!-- to be regenerated: (.+?) -->")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPAN = re.compile(r"`(python -m harness[^`]*)`")
RUN_ID = re.compile(r"\b[a-z0-9_]+-[a-z0-9_]+-(?:native|sb3|trl)-[a-z0-9_]+-s\d+-[0-9a-f]{12}\b")
PLACEHOLDER_WORD = re.compile(r"\b[A-Z][A-Z_]+\b|\.\.\.|\||<|\[")
#: paths no page may cite: the shared folder outside the repository, machine paths
OUTSIDE = re.compile(r"\.\./shared|/work/|/home/|DESIGN\.md")
#: a test file named on a page (in prose or code, linked or not)
TEST_FILE = re.compile(r"(?<![\w./-])(tests/[\w/]*test_\w+\.py)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int          # 1-based line of the opening fence
    lang: str
    text: str          # the block's content
    marker: str | None  # the command of the <!-- output of: ... --> line just before it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def is_output(self) -> bool:
        first = self.text.lstrip().split("\n", 1)[0]
        return self.lang == "text" or first.startswith(("$ ", ">>> ", "error:"))

    @property
    def shown_command(self) -> str | None:
        first = self.text.split("\n", 1)[0]
        return first[2:].strip() if first.startswith("$ ") else None

    @property
    def output(self) -> str:
        """The block without its ``$ command`` line."""
        return self.text.split("\n", 1)[1] if self.shown_command else self.text


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if fence:
            indent, lang, start = fence.group(1), fence.group(2), i
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            prev = lines[start - 1].strip() if start else ""
            marker = MARKER.fullmatch(prev)
            out.append(Block(page, start + 1, lang, "\n".join(body), marker.group(1) if marker else None))
        i += 1
    return out


def _strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def command_lines() -> list[tuple[str, str]]:
    """(where, command) for every ``python -m harness...`` command line the pages show: in code blocks,
    in markers and placeholders, and in inline code without placeholders (NAME, PATH, a|b, ...)."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        text = page.read_text()
        rel = page.relative_to(ROOT)
        for b in blocks(page):
            for line in b.text.split("\n"):
                m = re.match(r"^(?:\$ )?(?:\w+=\S+ )*(python -m harness\S* .*|python -m harness\S*)$", line.strip())
                if m and not b.is_output or (m and line.startswith("$ ")):
                    found.append((f"{b.where}", _strip_comment(m.group(1))))
        for pattern in (MARKER, PLACEHOLDER):
            for m in pattern.finditer(text):
                if m.group(1).startswith("python -m harness"):
                    found.append((f"{rel} marker", m.group(1)))
        for m in SPAN.finditer(text):
            cmd = " ".join(m.group(1).split())
            words = cmd.split(" ", 3)
            if words[2] in COMMANDS and not PLACEHOLDER_WORD.search(words[3] if len(words) > 3 else ""):
                found.append((f"{rel} inline", cmd))
    return sorted(set(found), key=lambda x: (x[1], x[0]))


def split(command: str) -> tuple[str, list[str]]:
    words = shlex.split(command)
    assert words[:2] == ["python", "-m"] and words[2] in COMMANDS, command
    return words[2], words[3:]


def _needs_plugin(args: list[str]) -> None:
    for a in args:
        for launcher, module in (("ray", "hydra_plugins.hydra_ray_launcher"),
                                 ("harness_slurm", "hydra_plugins.hydra_submitit_launcher"),
                                 ("submitit", "hydra_plugins.hydra_submitit_launcher")):
            if a.startswith("hydra/launcher=") and a.split("=", 1)[1].startswith(launcher):
                pytest.importorskip(module)


def is_error_example(b: Block) -> bool:
    return b.output.lstrip().startswith("error:")


def is_cheap(b: Block) -> bool:
    """Produced without training: diagnose, --help, or a command that stops at validation."""
    if b.marker is None or not b.marker.startswith("python -m harness"):
        return False
    module, args = split(b.marker)
    return module in ("harness.diagnose", "harness.watch") or "--help" in args or is_error_example(b)


def is_training(b: Block) -> bool:
    if b.marker is None or not b.marker.startswith("python -m harness ") or is_cheap(b):
        return False
    return "-m" not in split(b.marker)[1]


# ---- links and paths ------------------------------------------------------------------------------

@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(page):
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or ROOT not in (path, *path.parents):
            bad.append(target)
    assert not bad, f"{page.relative_to(ROOT)}: links that do not resolve to a file in the repository: {bad}"


def test_no_page_cites_a_path_outside_the_repository():
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in LINKED
           for i, line in enumerate(p.read_text().split("\n"), 1) if OUTSIDE.search(line)]
    assert not bad, "\n".join(bad)


def test_no_code_comment_cites_the_design_outside_the_repository():
    bad = []
    for base in ("harness", "faults", "hydra_plugins", "benchmarks", "tests"):
        for path in sorted((ROOT / base).rglob("*")):
            if path.suffix not in (".py", ".yaml") or not path.is_file():
                continue
            for i, line in enumerate(path.read_text().split("\n"), 1):
                comment = line.split("#", 1)[1] if "#" in line else ""
                if "DESIGN.md" in comment or "../shared" in comment:
                    bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "cite docs/design.md instead:\n" + "\n".join(bad)


def test_every_test_file_a_page_names_exists():
    missing = [f"{p.relative_to(ROOT)}:{i}: {path}" for p in LINKED
               for i, line in enumerate(p.read_text().split("\n"), 1) for path in TEST_FILE.findall(line)
               if not (ROOT / path).is_file()]
    assert not missing, "test files the pages name that do not exist:\n" + "\n".join(missing)


# ---- commands -------------------------------------------------------------------------------------

def test_the_pages_show_commands():
    assert len(command_lines()) >= 20


def _places() -> dict[str, list[str]]:
    """Each distinct command line -> where the pages show it (composed once, however often it is shown)."""
    places: dict[str, list[str]] = defaultdict(list)
    for where, command in command_lines():
        places[command].append(where)
    return places


PLACES = _places()


@pytest.mark.parametrize("command", sorted(PLACES), ids=sorted(PLACES))
def test_every_command_line_composes(command):
    module, args = split(command)
    _needs_plugin(args)
    # the run command validates the experiment; the others compose here (their own validation reads
    # logs, models and stores, and their examples are run by the output-block test)
    validate = {} if module == "harness" else {"validate": lambda cfg: None}
    try:
        if any(b.marker == command and is_error_example(b) for b in ALL_BLOCKS):
            if module == "harness":       # an error example of the run command: it fails before anything runs
                with pytest.raises(ConfigError):
                    preflight(args, COMMANDS[module], **validate)
            return
        preflight(args, COMMANDS[module], **validate)
    except (ConfigError, pytest.fail.Exception) as exc:
        raise AssertionError(f"`{command}`, shown at {', '.join(PLACES[command])}: {exc}") from exc


# ---- output blocks --------------------------------------------------------------------------------

ALL_BLOCKS = [b for p in PAGES for b in blocks(p)]
OUTPUT_BLOCKS = [b for b in ALL_BLOCKS if b.is_output]


@pytest.mark.parametrize("block", OUTPUT_BLOCKS, ids=lambda b: b.where)
def test_every_output_block_names_its_command(block):
    assert block.marker, f"{block.where}: an output block needs '<!-- output of: COMMAND -->' on the line before it"
    if block.shown_command is not None:
        assert block.shown_command == block.marker, f"{block.where}: the block shows another command than its marker"


def normalise(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    text = text.replace(str(ROOT) + os.sep, "").replace(str(ROOT), ".")
    text = re.sub(r"\b\d+:\d\d(:\d\d)?\b", "T", text)                 # 0:00:04, 71:58
    text = re.sub(r"\b\d+(\.\d+)? ?(s|ms|min)\b", "N s", text)         # 37.7 s, 15 s
    lines = [ln.rstrip() for ln in text.strip("\n").split("\n")]
    return "\n".join(ln for ln in lines if ln)


@contextlib.contextmanager
def _terminal():
    """What a terminal 100 columns wide shows, without colour or Python's warnings."""
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "NO_COLOR")}
    os.environ.update(COLUMNS="100", NO_COLOR="1")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def produce(command: str) -> str:
    """What the command prints (stdout, then stderr) run from the repository, in-process."""
    module, args = split(command)
    with _terminal():
        ran = run(module, *args, cwd=ROOT)
    return ran.stdout + ran.stderr


@pytest.mark.parametrize("block", [b for b in OUTPUT_BLOCKS if is_cheap(b)], ids=lambda b: b.where)
def test_cheap_output_blocks_are_what_the_command_prints(block):
    assert normalise(produce(block.marker)) == normalise(block.output), (
        f"{block.where}: the output of `{block.marker}` changed: run `python -m tests.cli.test_docs` to rewrite it")


@cache
def expected_run_ids(command: str) -> frozenset[str]:
    exp = make_experiment(split(command)[1])
    ids = {run_id(exp.key())}
    if exp.twin and exp.fault.name != "none":
        ids.add(run_id(healthy_twin(exp).key()))
    return frozenset(ids)


@pytest.mark.parametrize("block", [b for b in OUTPUT_BLOCKS if is_training(b)], ids=lambda b: b.where)
def test_run_ids_of_a_training_block_are_the_ones_the_code_gives(block):
    shown = set(RUN_ID.findall(block.text))
    stale = shown - expected_run_ids(block.marker)
    assert not stale, (f"{block.where}: run ids not given by `{block.marker}` with the current code: "
                       f"{sorted(stale)} (expected {sorted(expected_run_ids(block.marker))}): run it again")


def test_every_run_id_on_the_pages_comes_from_a_training_command_shown():
    known = set().union(*[expected_run_ids(b.marker) for b in OUTPUT_BLOCKS if is_training(b)])
    shown = {(p.relative_to(ROOT), rid) for p in PAGES for rid in RUN_ID.findall(p.read_text())}
    stale = sorted(f"{p}: {rid}" for p, rid in shown if rid not in known)
    assert not stale, "run ids that no training command on the pages gives with the current code:\n" + "\n".join(stale)


def test_no_sweep_output_shows_run_ids():
    sweeps = [b for b in OUTPUT_BLOCKS if b.marker and b.marker.startswith("python -m harness -m")]
    assert all(not RUN_ID.search(b.text) for b in sweeps)


# ---- rewriting the cheap blocks -------------------------------------------------------------------

def regenerate() -> list[str]:
    """Rewrite every cheap output block from its command's current output; returns what changed."""
    changed = []
    for page in PAGES:
        lines = page.read_text().split("\n")
        for b in reversed([b for b in blocks(page) if b.is_output and is_cheap(b)]):
            out = produce(b.marker).replace(str(ROOT) + os.sep, "").rstrip("\n").split("\n")
            body = ([f"$ {b.marker}"] if b.shown_command else []) + out
            end = b.line
            while lines[end].strip() != "```":
                end += 1
            if lines[b.line:end] != body:
                lines[b.line:end] = body
                changed.append(b.where)
        page.write_text("\n".join(lines))
    return changed


if __name__ == "__main__":
    for where in regenerate():
        print(f"rewrote {where}")


def site_config() -> dict:
    """mkdocs.yml as mkdocs reads it, but a ``!!python/name:`` tag (a custom fence's formatter) stays its
    dotted name instead of being imported."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)


def test_the_site_lists_every_page():
    """README.md: the same pages build as a site (``mkdocs serve``): mkdocs.yml reads docs/, its navigation
    holds every page once, the site's requirements are the file the README names, and its home page shows the
    README's install command."""
    site = site_config()
    assert site["docs_dir"] == "docs" and site.get("strict") is True
    def pages(entries):           # a section's value is a list of entries
        for entry in entries:
            for value in entry.values():
                yield from (pages(value) if isinstance(value, list) else [value])

    nav = list(pages(site["nav"]))
    docs = ROOT / "docs"
    assert len(nav) == len(set(nav)) and set(nav) == {str(p.relative_to(docs)) for p in docs.rglob("*.md")}
    assert "pip install -r docs/requirements.txt && mkdocs serve" in (ROOT / "README.md").read_text()
    install = [b.text for page in ("README.md", "docs/index.md") for b in blocks(ROOT / page)
               if b.lang == "bash" and "python -m harness fault=shared_policy" in b.text]
    assert len(install) == 2 and install[0] == install[1]            # the site's home page installs as the README
    assert any(line.startswith("mkdocs") for line in (ROOT / "docs" / "requirements.txt").read_text().splitlines())


def test_a_mermaid_block_is_drawn_on_the_site():
    """A page's ```mermaid block is drawn as a diagram: mkdocs.yml gives superfences a mermaid custom fence
    (mkdocs-material then loads Mermaid), and the architecture page has its three pictures."""
    extensions = site_config()["markdown_extensions"]
    fences = next(e["pymdownx.superfences"] for e in extensions if isinstance(e, dict) and "pymdownx.superfences" in e)
    assert {"name": "mermaid", "class": "mermaid", "format": "pymdownx.superfences.fence_code_format"} in fences[
        "custom_fences"]
    drawn = [b for p in [*PAGES, *sorted((ROOT / "docs").rglob("*/*.md"))] for b in blocks(p) if b.lang == "mermaid"]
    assert sum(b.page.name == "architecture.md" for b in drawn) == 3
    assert all(b.text.split("\n", 1)[0].startswith(("flowchart", "graph")) for b in drawn), [b.where for b in drawn]


def test_the_diagnose_speed_quoted_is_the_recorded_one():
    """docs/benchmarks.md's diagnose speed table is benchmarks/results/diagnose_speed.json's figures."""
    import json

    recorded = json.loads((ROOT / "benchmarks" / "results" / "diagnose_speed.json").read_text())
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    table = text.split("<!-- diagnose speed: from benchmarks/results/diagnose_speed.json -->")[1].split("\n\n")[0]
    cells = [line.strip("|").split("|")[1].strip() for line in table.strip().splitlines()[2:]]
    cold = recorded["cold_start_s"]
    assert cells == [f"{recorded['cold_start_median_s']:.2f}", f"{max(cold.values()):.2f}",
                     f"{recorded['import_s']:.2f}", f"{recorded['batch_per_log_s']:.2f}"]
    assert f"batch of {recorded['batch_logs']}" in table
    slowest = max(cold, key=cold.get).split("_")[0].split("/")[0]          # the dialect the row names
    assert slowest.lower() in table.lower(), (slowest, table)
