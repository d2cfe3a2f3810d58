"""The product pages read as docs, not a lab notebook: short sentences, no dated history
(benchmarks/docs_style.py measures them; history lives in docs/lab-notes/)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.paths import ROOT

spec = importlib.util.spec_from_file_location("docs_style", ROOT / "benchmarks" / "docs_style.py")
docs_style = importlib.util.module_from_spec(spec)
sys.modules["docs_style"] = docs_style
spec.loader.exec_module(docs_style)
PAGES = docs_style.product_pages(ROOT)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_a_product_page_reads_in_short_sentences_without_history(page):
    style = docs_style.measure(page)
    assert style.mean_words <= docs_style.MAX_WORDS, (style.mean_words, style.longest[:3])
    assert style.history == [], style.history


def test_the_measure_counts_what_a_reader_reads(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A heading with many words that is not counted at all here\n\n"
                    "One two three four. Five six, e.g. seven eight!\n\n"
                    "- a list item of six words\n- `inline code` and [a link](http://x) count\n\n"
                    "```\nnot counted at all, whatever it says.\n```\n\n| a | table |\n|---|---|\n")
    style = docs_style.measure(page)
    assert style.sentences == 4 and style.mean_words == pytest.approx((4 + 5 + 6 + 5) / 4)
    page.write_text("Measured on 2026-11-28 at commit 0e977d4, as issue 24 asks; verl #342 and TRL issue 3961 "
                    "are citations.\n")
    assert set(docs_style.measure(page).history) >= {"2026-11-28", "issue 24"}
    assert not {"#342", "issue 3961"} & set(docs_style.measure(page).history)


def test_a_mermaid_block_is_code_not_prose(tmp_path):
    """A diagram (```mermaid, rendered by mkdocs-material) is fenced code: its labels are neither
    sentences nor history, however long or dated they are."""
    page = tmp_path / "page.md"
    page.write_text("One two three four.\n\n```mermaid\nflowchart TB\n"
                    '  a["a label of many words that would make a very long sentence if it were prose at all"]\n'
                    '  a --> b["measured on 2026-11-28, as issue 24 asks"]\n```\n\nFive six seven eight.\n')
    style = docs_style.measure(page)
    assert style.sentences == 2 and style.mean_words == 4 and style.history == []


def test_a_missing_page_is_one_line_not_a_traceback(tmp_path, capsys):
    missing = tmp_path / "no-such-page.md"
    (tmp_path / "page.md").write_text("One two three.\n")
    with pytest.raises(SystemExit) as exit_:
        docs_style.main([str(tmp_path / "page.md"), str(missing)])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: no such page: {missing}\n"
