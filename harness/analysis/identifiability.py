"""What a framework's log can tell apart, computed from the diagnosis model's own out-of-fold answers.

For each framework view, the model's out-of-fold top class on its training logs (each log scored by a
model that never saw its run) gives a confusion table. From it, never by hand:

- **faults this view cannot show**: most of their logs (>= ``INVISIBLE``, past the onset) are taken
  for healthy (the metrics this framework logs carry no trace of them);
- **identifiability classes**: visible faults the model confuses with each other (each is taken for
  the other on >= ``LINK`` of their logs, counted both ways) are joined; a class of several members
  is answered as the class, with the settings to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.analysis.learning import HEALTHY

INVISIBLE = 0.5      # a fault whose logs are taken for healthy this often leaves no trace in the view
#                     (0.5, not 0.7: paired on the same held-out runs of the published examples, 0.7 calls
#                     fewer healthy logs healthy in the SB3 and CleanRL views and lowers top-1 in the TRL and
#                     verl GRPO views, each beyond its 95% interval: benchmarks/results/studies/heldout_invisible.md)
LINK = 0.25          # two faults taken for each other this often (a -> b plus b -> a) are one class
MIN_LOGS = 5         # logs of a fault below which nothing is claimed about it


@dataclass
class Identifiability:
    """The classes of a view: ``classes`` maps every known fault to the members of its class (itself
    alone when the view tells it apart); ``invisible`` the faults the view cannot show."""

    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    invisible: tuple[str, ...] = ()
    confusion: dict[str, dict[str, float]] = field(default_factory=dict)   # true -> answered -> share

    def members(self, fault: str) -> tuple[str, ...]:
        return self.classes.get(fault, (fault,))


def confusion(labels: Sequence[str], answers: Sequence[str]) -> dict[str, dict[str, float]]:
    """true label -> {answered class: share of its logs}."""
    labels, answers = np.asarray(labels), np.asarray(answers)
    out: dict[str, dict[str, float]] = {}
    for label in np.unique(labels):
        got = answers[labels == label]
        values, counts = np.unique(got, return_counts=True)
        out[str(label)] = {str(v): float(c) / len(got) for v, c in zip(values, counts)}
    return out


def identify(labels: Sequence[str], answers: Sequence[str], faults: Sequence[str]) -> Identifiability:
    """Classes and invisible faults from out-of-fold answers (``answers[i]``: the top class of log
    ``i``; ``labels[i]``: its true class) for the known ``faults``."""
    table = confusion(labels, answers)
    counts = {str(k): int(v) for k, v in zip(*np.unique(np.asarray(labels), return_counts=True))}
    judged = [f for f in faults if counts.get(f, 0) >= MIN_LOGS and f != HEALTHY]
    invisible = tuple(sorted(f for f in judged if table[f].get(HEALTHY, 0.0) >= INVISIBLE))
    visible = [f for f in faults if f != HEALTHY and f not in invisible]
    parent = {f: f for f in visible}

    def root(f: str) -> str:
        while parent[f] != f:
            parent[f] = parent[parent[f]]
            f = parent[f]
        return f

    for i, a in enumerate(visible):
        for b in visible[i + 1:]:
            if table.get(a, {}).get(b, 0.0) + table.get(b, {}).get(a, 0.0) >= LINK:
                parent[root(a)] = root(b)
    groups: dict[str, list[str]] = {}
    for f in visible:
        groups.setdefault(root(f), []).append(f)
    classes = {f: tuple(sorted(groups[root(f)])) for f in visible}
    classes.update({f: (f,) for f in invisible})
    return Identifiability(classes=classes, invisible=invisible, confusion=table)
