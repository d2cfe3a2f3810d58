"""How the product pages read: mean words per sentence, and what belongs in a changelog instead.

    python benchmarks/docs_style.py [PAGE ...] [--max-words 25]

Pages: README.md and docs/*.md (docs/lab-notes/ and CHANGELOG.md hold history and are not product
pages). Per page: sentences, mean words per sentence, and the dates, commit hashes and issue numbers it
holds. Sentences are counted on prose alone: fenced code, tables, headings, HTML comments and images are
stripped; inline code counts as one word; a link counts as its text; each list item is a sentence (or
several), split at . ! ? before a space or the end (abbreviations such as e.g. do not end one). Exit code
1 when a page's mean is above ``--max-words`` or it holds a date, a commit hash or an issue number
(tests/cli/test_docs_style.py runs it); 2, with one line naming them, when a page given does not exist.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_WORDS = 25
NOT_PRODUCT = ("lab-notes",)

ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "no.", "Fig.", "et al.")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
#: a word of 7 to 40 hex digits (with a digit and a letter): this project's commit when git knows it (another
#: project's commit cited as a bug's provenance is not history)
HEX = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
#: this project's issues ("issue 24": at most three digits); another project's (verl #342, trl#3120, TRL
#: issue 3961) are citations
ISSUE = re.compile(r"\bissues?\s+#?\d{1,3}\b", re.IGNORECASE)


def product_pages(root: Path = ROOT) -> list[Path]:
    """README.md and every docs page, history pages excluded."""
    docs = [p for p in sorted((root / "docs").rglob("*.md")) if not set(p.relative_to(root / "docs").parts) & set(NOT_PRODUCT)]
    return [root / "README.md", *docs]


def prose(text: str) -> list[str]:
    """The page's prose units: paragraphs and list items, code, tables, headings and comments stripped."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    units, current, fenced = [], [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            if current:
                units.append(" ".join(current))
                current = []
            continue
        if fenced or stripped.startswith(("|", "#", "![", "<")) or line.startswith("    ") and not current:
            if current:
                units.append(" ".join(current))
                current = []
            continue
        if not stripped:
            if current:
                units.append(" ".join(current))
                current = []
            continue
        item = re.match(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$", line)
        if item:                         # a list item starts a unit of its own
            if current:
                units.append(" ".join(current))
            current = [item.group(3)]
        else:
            current.append(stripped)
    if current:
        units.append(" ".join(current))
    return units


def sentences(unit: str) -> list[str]:
    """A prose unit split into sentences (words counted after inline code and links are reduced)."""
    unit = re.sub(r"`[^`]*`", "CODE", unit)
    unit = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", unit)
    unit = re.sub(r"\*\*|__", "", unit)
    for abbr in ABBREVIATIONS:
        unit = unit.replace(abbr, abbr.replace(".", "\u2024"))
    parts = re.split(r"(?<=[.!?])[\"')\]]*\s+|(?<=[.!?:])$", unit)
    return [p for p in parts if words(p)]


def words(sentence: str) -> int:
    return sum(1 for token in sentence.split() if re.search(r"[A-Za-z0-9]", token))


@dataclass
class PageStyle:
    page: str
    sentences: int
    mean_words: float
    longest: list[tuple[int, str]] = field(default_factory=list)
    history: list[str] = field(default_factory=list)      # dates, commit hashes, issue numbers


def measure(path: Path) -> PageStyle:
    text = path.read_text()
    all_sentences = [s for unit in prose(text) for s in sentences(unit)]
    counts = [words(s) for s in all_sentences]
    mean = sum(counts) / len(counts) if counts else 0.0
    longest = sorted(zip(counts, all_sentences), key=lambda t: -t[0])[:5]
    outside_code = re.sub(r"```.*?```", "", text, flags=re.S)
    found = {m.group(0) for rx in (DATE, ISSUE) for m in rx.finditer(outside_code)}
    history = sorted(found | own_commits({m.group(0) for m in HEX.finditer(outside_code)}))
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return PageStyle(str(rel), len(counts), mean, longest, history)


def own_commits(words: set[str]) -> set[str]:
    """The words that name a commit of this repository (git cat-file; none without git)."""
    if not words:
        return set()
    try:
        out = subprocess.run(["git", "cat-file", "--batch-check"], input="".join(f"{w}^{{commit}}\n" for w in sorted(words)),
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return set()
    return {w for w, line in zip(sorted(words), out.stdout.splitlines()) if not line.endswith("missing")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="*", type=Path)
    parser.add_argument("--max-words", type=float, default=MAX_WORDS)
    parser.add_argument("--longest", action="store_true", help="print each page's five longest sentences")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.pages if not p.is_file()]
    if missing:                      # one line, before any page is measured (exit 2: not a style verdict)
        print(f"error: no such page: {', '.join(missing)}", file=sys.stderr)
        sys.exit(2)
    pages = [p.resolve() for p in args.pages] or product_pages()
    bad = False
    for path in pages:
        style = measure(path)
        flag = style.mean_words > args.max_words or bool(style.history)
        bad |= flag
        print(f"{'FAIL' if flag else 'ok  '} {style.page:32} {style.sentences:5d} sentences  "
              f"{style.mean_words:5.1f} words/sentence" + (f"  history: {', '.join(style.history[:8])}"
                                                           + (" ..." if len(style.history) > 8 else "")
                                                           if style.history else ""))
        if args.longest:
            for n, s in style.longest:
                print(f"      {n:3d}: {s[:160]}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
