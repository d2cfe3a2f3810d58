"""Backend agreement: the same fault run on several backends (native, SB3, TRL ...), each
signature's held-out rates side by side and whether the backends disagree; and the backend notes
(how each backend's form of a fault differs from the native one) that explain a disagreement."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import pandas as pd

from harness.agents.base import trainers_of
from harness.catalogue.rows import AgreementRow, CellResult
from harness.config import ConfigError, backend_config

#: what makes two cells the same fault on different backends
AGREEMENT_KEYS = ("fault", "fault_params", "onset_kind", "algo", "algo_variant", "env")
DISAGREE = 0.5             # a rate gap (faulty or healthy) this large is a disagreement


def _spread(rates: list[float]) -> float:
    """Largest minus smallest of the rates that are not NaN (0 when none is)."""
    values = [r for r in rates if not math.isnan(r)]
    return max(values) - min(values) if values else 0.0


#: one cell as the agreement reads it: its key, its backend, and per signature (name, expected, held-out
#: rate on faulty runs, on healthy runs)
CellRates = tuple[tuple[Any, ...], str, list[tuple[str, bool, float, float]]]


def backend_agreement(results: list[CellResult]) -> list[AgreementRow]:
    """The agreement over the cells a build evaluated (:func:`agreement`)."""
    return agreement([(tuple(getattr(r.summary, k) for k in AGREEMENT_KEYS), r.summary.backend,
                       [(s.name, s.expected, s.held_out.faulty.rate, s.held_out.healthy.rate) for s in r.signatures])
                      for r in results])


def frame_agreement(cat: pd.DataFrame) -> list[AgreementRow]:
    """The agreement over a catalogue frame's cells (catalogue.parquet, e.g. parts merged), in its row
    order: the same rows :func:`backend_agreement` gives for the cells it was built from."""
    sigs = cat[cat["kind"] == "signature"]
    return agreement([(tuple(rows.iloc[0][k] for k in AGREEMENT_KEYS), str(rows.iloc[0]["backend"]),
                       list(zip(rows["name"], rows["expected"].astype(bool), rows["rate_faulty"].astype(float),
                                rows["rate_healthy"].astype(float))))
                      for _, rows in sigs.groupby("cell", sort=False)])


def agreement(cells: list[CellRates]) -> list[AgreementRow]:
    """For faults run on more than one backend (same algorithm, env, parameters and onset kind):
    each signature's held-out firing rates side by side, and whether the backends disagree: the rate
    on faulty or on healthy runs differs by >= 0.5. (Whether a signature "separates" is not compared:
    it counts the look-alike controls, which one backend may not have.) Groups in key order,
    signatures in registry order, backends sorted."""
    groups: dict[tuple[Any, ...], list[CellRates]] = defaultdict(list)
    for cell in cells:
        groups[cell[0]].append(cell)
    rows = []
    for key in sorted(groups):
        members = groups[key]
        backends = sorted({backend for _, backend, _ in members})
        if len(backends) < 2:
            continue
        # a fault on two base configurations of one backend (e.g. two budgets): the first is compared
        by_backend: dict[tuple[str, str], tuple[float, float]] = {}
        expected: dict[str, bool] = {}
        for _, backend, sigs in members:
            for name, exp, faulty, healthy in sigs:
                by_backend.setdefault((name, backend), (float(faulty), float(healthy)))
                expected.setdefault(name, bool(exp))
        for name in expected:
            rates = {b: by_backend[name, b] for b in backends if (name, b) in by_backend}
            disagree = (_spread([f for f, _ in rates.values()]) >= DISAGREE
                        or _spread([h for _, h in rates.values()]) >= DISAGREE)
            rows.append(AgreementRow(key=dict(zip(AGREEMENT_KEYS, key)), signature=name,
                                     expected=expected[name], rates=rates, disagree=bool(disagree)))
    return rows


def backend_notes(backends: list[str]) -> dict[str, tuple[dict[str, str], str]]:
    """Per backend, how each fault's form there differs from the native one and what differs for
    every run (the trainer's ``differences`` / ``common_differences``), for explaining disagreements."""
    notes = {}
    for name in backends:
        try:
            trainers = trainers_of(backend_config(name))
        except ConfigError:        # a backend no longer configured: its runs stay, unexplained
            continue
        per_fault = {k: v for t in trainers for k, v in t.differences.items()}
        notes[name] = (per_fault, " ".join(t.common_differences for t in trainers if t.common_differences))
    return notes
