"""Markdown helpers for the reports (catalogue, evaluation, datasheet)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A GitHub markdown table, as lines; a "|" inside a cell (a catalogue cell's name, a part's note) is
    escaped so that it does not split the column (one already escaped is left as it is)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_PIPE.sub(r"\\|", str(cell)) for cell in row) + " |" for row in rows]
    return lines


_PIPE = re.compile(r"(?<!\\)\|")


def pct(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0%}"


def num(x: Any, fmt: str = ".3g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, fmt) if isinstance(x, float) else str(x)
