"""A progress line for the catalogue's long loops: a build over thousands of runs reads its cells, once
per framework view too, for tens of minutes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def clock(seconds: float) -> str:
    """``m:ss`` (the catalogue's and the sweep's progress lines)."""
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


def progress(items: Iterable[T], total: int, what: str, every_s: float = 10.0,
             echo: Callable[[str], None] = print) -> Iterator[T]:
    """``items``, printing ``[catalogue] <what>: k/total cells, m:ss elapsed, ETA m:ss`` when an item is
    done and ``every_s`` seconds have passed since the last line (none for a loop shorter than that)."""
    start = last = time.monotonic()
    for done, item in enumerate(items, 1):
        yield item
        now = time.monotonic()
        if now - last >= every_s and done < total:
            last = now
            elapsed = now - start
            echo(f"[catalogue] {what}: {done}/{total} cells, {clock(elapsed)} elapsed, "
                 f"ETA {clock(elapsed / done * (total - done))}")
