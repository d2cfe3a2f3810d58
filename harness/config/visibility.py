"""What a detector may see of a run: each schema's documented whitelist of its configuration, and an
opaque handle instead of its run id (which names the fault)."""

from __future__ import annotations

import hashlib
from typing import Any

from harness.config.schemas import ALGO_SCHEMAS

#: schema fields that are the harness's own bookkeeping (the algorithm's name, the look-alike
#: control flag and its variant): never shown to a detector, never in an exported log
HIDDEN: tuple[str, ...] = ("name", "is_control", "variant",
                           # GRPO: how the harness made the start checkpoint (a user's RL config names a
                           # checkpoint, not the supervised run that produced it)
                           "sft_steps", "sft_lr", "sft_batch", "sft_digit_noise", "sft_format_noise", "sft_seed")


def visible_config(algo: str, configured: dict[str, Any]) -> dict[str, Any]:
    """The configured hyperparameters a detector may see: the schema's documented whitelist."""
    schema = ALGO_SCHEMAS.get(algo)
    keys = schema.VISIBLE if schema is not None else ()
    return {k: configured[k] for k in keys if k in configured}


def opaque_id(run_id: str) -> str:
    """A stable handle for a stored run that carries none of its labels."""
    return "run-" + hashlib.sha256(f"rl-fault-harness/opaque/{run_id}".encode()).hexdigest()[:16]
