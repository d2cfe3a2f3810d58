"""How every report and run id names an algorithm configuration and a setup."""

from __future__ import annotations


def algo_label(algo: str, variant: str = "default") -> str:
    """``ppo``, or ``ppo_single_pass`` for a named variant (as in run ids and reports)."""
    return algo if variant == "default" else f"{algo}_{variant}"


def setup_label(algo: str, variant: str, env: str, backend: str) -> str:
    """``algo[_variant]/env/backend``: one setup, as every report names it."""
    return f"{algo_label(algo, variant)}/{env}/{backend}"
