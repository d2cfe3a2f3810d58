"""The logs to evaluate and what each can show: the one name table of the generators' bug variants
(``FAULTS``), what each framework's log cannot show (``LOG_LIMITS``), the frameworks read under the root
(``EXPECTED``) and the report row each log counts in; :func:`tasks` turns the frameworks' ``labels.json``
files into the logs to diagnose.

Nothing of the harness is imported here (nor in the other modules of the evaluation at their top):
common.py, which the generators import and which must not pull in the harness, imports ``FAULTS`` from
here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROOT = Path(os.environ.get("REALWORLD_ROOT", Path(__file__).resolve().parents[2] / "results" / "realworld"))

# The ONE name table: how each bug variant of sb3_runs.py / trl_runs.py / cleanrl_runs.py is called in the harness's
# fault catalogue (issues 13, 14, 15). Rename here only; labels.json's "fault" is re-derived from it.
FAULTS: dict[str, str] = {
    "healthy": "healthy",
    "lr_high": "excessive_lr",
    "clip_tiny": "tiny_clip",
    "lr_low": "lr_too_low",
    "ent_neg": "entropy_sign_flip",
    "gradclip_tiny": "grad_clip_tiny",
    "targetkl_tiny": "target_kl_too_strict",
    "vf_huge": "vf_coef_too_large",
    "gamma_off": "wrong_gamma",
    "reward_zero": "zero_reward",
    "reward_neg": "reward_sign_flip",
    "reward_x1000": "reward_scale_wrong",
    "trunc_as_term": "truncation_as_termination",
    "vecnorm_frozen": "obs_norm_frozen",
    "one_epoch": "ppo_epochs_ignored",
    "old_logp_recomputed": "shared_policy",
    "format_regex": "format_reward_never_matches",
    "beta_neg": "kl_penalty_sign_flip",
    "ref_is_policy": "reference_not_frozen",
}

# cleanrl_runs.py's own variants (no SB3/TRL twin) are named in common.py's MORE_FAULTS; fault_of() reads both.

# What a framework's logs can and cannot show of a fault (decided from what the framework logs, before
# looking at any diagnosis): the metric it does not log. "cannot reveal": the fault is left out of the
# attribution scores on "the faults this log can show"; "partly" / "half": kept (the log shows some of it).
LOG_LIMITS: dict[tuple[str, str], str] = {
    ("sb3", "obs_norm_frozen"): "cannot reveal: SB3 logs no observation statistics and the saved model does not hold "
                                "the VecNormalize wrapper; only a slower learning curve could hint at it",
    ("sb3", "truncation_as_termination"): "cannot reveal: SB3 logs no count of terminated vs truncated episodes and "
                                          "no value targets; only the value loss / explained variance move, indirectly",
    ("sb3", "zero_reward"): "half: rollout/ep_rew_mean is Monitor's return; with the wrapper outside Monitor it is "
                            "the env's true return and the learner's zero reward shows only through train/value_loss "
                            "and train/explained_variance",
    ("sb3", "reward_sign_flip"): "half: outside Monitor, ep_rew_mean is the env's return (the flip shows as a "
                                 "falling return, value loss only); inside, the logged returns are negated",
    ("sb3", "reward_scale_wrong"): "half: outside Monitor, ep_rew_mean is the env's return; the x1000 shows only "
                                   "in train/value_loss",
    ("sb3", "grad_clip_tiny"): "partly: SB3 logs no gradient norm; max_grad_norm is in the saved model, the effect "
                               "shows as small approx_kl / clip_fraction",
    ("sb3", "ppo_epochs_ignored"): "partly: no optimizer-step count; train/n_updates grows by 1 per rollout while "
                                   "the saved model says n_epochs=10",
    ("trl", "shared_policy"): "partly: TRL logs no ratio statistics, only clip_ratio/*; a ratio pinned at 1 logs clip "
                              "ratios of exactly 0, as every healthy num_iterations=1 run does; num_iterations=2 is "
                              "in training_args.bin / the TensorBoard 'args' text",
    # a TRL setting's own entry (the report row's name) comes before its framework's
    ("trl (defaults)", "shared_policy"): "cannot reveal: at TRL's default learning_rate (1e-6) a healthy run with "
                                         "num_iterations=2 logs clip ratios of exactly 0 on every step as well "
                                         "(trl_runs.py's trl_defaults healthy job with num_iterations=2, seed 21, "
                                         "outside the test set: 150 of 150 steps; probe_runs.py trains it at seeds "
                                         "11 and 12); TRL logs nothing else that moves with the ratio. Decided on "
                                         "2026-11-28, after this table's answers were seen",
    ("trl", "ppo_epochs_ignored"): "partly: TRL logs no optimizer-step or iteration count; the trace is the cadence "
                                   "(a generation, hence reward rows, every step) against num_iterations=2 in the args",
    ("trl", "reference_not_frozen"): "partly: kl is logged only when beta != 0; with the reference = the policy it is "
                                     "exactly 0 at num_iterations=1",
    ("trl_ppo", "vf_coef_too_large"): "cannot reveal: PPOTrainer's value model is a network of its own whose only "
                                      "loss is the value term, so Adam's per-parameter step cancels a 100x vf_coef; "
                                      "trl_ppo_runs.py's vf_huge runs log what the healthy runs log",
    ("trl", "kl_penalty_sign_flip"): "partly: a negative beta is in the args when set in GRPOConfig; flipped in code, "
                                     "only a kl growing faster than at the configured beta shows",
    # CleanRL (cleanrl/ppo.py, ppo_continuous_action.py at fe8d8a03): TensorBoard scalars charts/episodic_return
    # and episodic_length per finished episode (RecordEpisodeStatistics, the first wrapper after gym.make /
    # FlattenObservation), and per iteration charts/learning_rate, losses/{value_loss, policy_loss, entropy,
    # old_approx_kl, approx_kl} of the LAST minibatch, losses/clipfrac (mean over every minibatch run),
    # losses/explained_variance, charts/SPS; the hyperparameters text is vars(args). No gradient norm, no
    # optimizer-step / epoch count, no advantage, ratio or reward statistics of what the learner gets.
    ("cleanrl", "grad_clip_tiny"): "partly: CleanRL logs no gradient norm; --max-grad-norm is in the hyperparameters "
                                   "text, the effect shows as a small approx_kl / clipfrac and a return that stays flat",
    ("cleanrl", "no_zero_grad"): "partly: CleanRL logs no gradient norm; gradients summed over the whole run "
                                 "(clip_grad_norm_ rescales the sum) show only through approx_kl, clipfrac, the "
                                 "losses and the return",
    ("cleanrl", "ppo_epochs_ignored"): "partly: no optimizer-step or epoch count; the hyperparameters text still says "
                                       "update_epochs 4 / 10; one epoch shows only as a smaller approx_kl / clipfrac",
    ("cleanrl", "target_kl_too_strict"): "partly: the early stop is not logged (no epoch or minibatch count); "
                                         "target_kl is in the hyperparameters text; the logged approx_kl is the last "
                                         "minibatch's, the one that stopped the epoch loop",
    ("cleanrl", "gae_no_done_mask"): "partly: CleanRL logs no advantage or value-target statistics; advantages "
                                     "carried across episode ends show only through losses/value_loss, "
                                     "explained_variance and the return",
    ("cleanrl", "zero_reward"): "half: charts/episodic_return comes from RecordEpisodeStatistics; with the wrapper "
                                "inside it the logged returns are 0, outside it they are the env's own return and "
                                "the learner's zero reward shows only through losses/value_loss and "
                                "explained_variance",
    ("cleanrl", "reward_sign_flip"): "half: inside RecordEpisodeStatistics the logged returns are negated; outside, "
                                     "the logged return is the env's (the flip shows as a return that falls, and in "
                                     "the value loss)",
    ("cleanrl", "reward_scale_wrong"): "half: inside RecordEpisodeStatistics the logged returns are x1000 (in "
                                       "ppo_continuous_action.py NormalizeReward, later in make_env, rescales what the "
                                       "learner gets: only the log and the first updates show it); outside, the logged "
                                       "return is the env's and the x1000 shows only in losses/value_loss",
}

# the words of a LOG_LIMITS entry decided after the answers were seen (the targets it moves are marked so)
POSTHOC = "after this table's answers were seen"

# frameworks whose logs are another framework's dialect: what those logs can show is that framework's
LIMITS_AS: dict[str, str] = {"trl-harness": "trl"}

#: the frameworks read under --root, in report order, with the dialect and algorithm diagnose must read
EXPECTED: dict[str, dict[str, str]] = {
    "sb3": {"profile": "sb3", "algo": "ppo"},
    "cleanrl": {"profile": "cleanrl", "algo": "ppo"},
    "trl": {"profile": "trl", "algo": "grpo"},
    # TRL's own trainer_state.json of the harness's backend=trl runs (trl_backend_logs.py)
    "trl-harness": {"profile": "trl", "algo": "grpo"},
    # TRL's PPOTrainer (trl_ppo_runs.py): PPO with a value model on a language model
    "trl_ppo": {"profile": "trl_ppo", "algo": "ppo_lm"},
}

#: the log each framework's label points at (the primary log), by kind
PRIMARY_KIND = {"sb3": "progress.csv", "cleanrl": "tensorboard", "trl": "trainer_state.json",
                "trl-harness": "trainer_state.json", "trl_ppo": "trainer_state.json"}

#: TRL's settings (labels' "setting"), each reported as its own row beside TRL as a whole
SETTINGS = {"script": "trl (script)", "trl_defaults": "trl (defaults)"}

HEALTHY = "healthy"


def fault_label(label: dict[str, Any]) -> str:
    """The harness's name of a label's bug: re-derived from its variant (FAULTS, extended by
    common.MORE_FAULTS for CleanRL's own variants); backend=trl runs carry the harness's name already."""
    if label.get("origin") == "harness backend=trl":
        return label["fault"]
    from benchmarks.realworld.common import fault_of

    return fault_of(label["variant"])


def limit_of(framework: str, fault: str, group: str | None = None) -> str | None:
    """What ``framework``'s log cannot show of ``fault`` (LOG_LIMITS: the report row ``group``'s own entry, else
    the framework's), None when it shows it."""
    return LOG_LIMITS.get((group or "", fault)) or LOG_LIMITS.get((LIMITS_AS.get(framework, framework), fault))


def can_show(framework: str, fault: str, group: str | None = None) -> bool:
    """The framework's log can show the fault (healthy always): no LOG_LIMITS entry saying "cannot reveal"."""
    limit = limit_of(framework, fault, group)
    return fault == HEALTHY or not (limit and limit.startswith("cannot reveal"))


def group_of(framework: str, setting: str | None) -> str:
    """The report row a log belongs to most specifically: TRL per setting, the others per framework."""
    return SETTINGS.get(setting or "", framework) if framework == "trl" else framework


def groups_of(record: dict[str, Any]) -> list[str]:
    """Every report row a log counts in: its own, TRL as a whole for a TRL setting, and all frameworks."""
    own = group_of(record["framework"], record.get("setting"))
    return [own, *([record["framework"]] if own != record["framework"] else []), "all"]


def tensorboard_subset(label: dict[str, Any]) -> bool:
    """The logs also diagnosed from their TensorBoard run (fixed before looking at any answer)."""
    if label["framework"] == "sb3":
        return label["env"] in ("CartPole-v1", "Pendulum-v1")
    return label["framework"] in ("trl", "trl_ppo") and label["seed"] in (0, 1)


def tasks(root: Path, tensorboard: str = "subset", limit: int | None = None) -> list[dict[str, Any]]:
    """One task per log to diagnose: {path, kind, log (primary | tensorboard), label}, framework by
    framework (EXPECTED's order), each framework's logs in label order; ``limit``: the first N per framework."""
    out = []
    for framework in EXPECTED:
        labels_file = root / framework / "labels.json"
        if not labels_file.exists():
            continue
        mine: list[dict[str, Any]] = []
        for rel, label in sorted(json.loads(labels_file.read_text()).items()):
            label = {**label, "framework": label.get("framework", framework), "fault": fault_label(label)}
            base = labels_file.parent
            mine.append({"path": base / rel, "kind": PRIMARY_KIND[framework], "log": "primary", "label": label})
            tb = label.get("tensorboard")
            if tb and tb != rel and (tensorboard == "all" or (tensorboard == "subset" and tensorboard_subset(label))):
                mine.append({"path": base / tb, "kind": "tensorboard", "log": "tensorboard", "label": label})
        out += mine[:limit] if limit is not None else mine
    return out


def skipped_dirs(root: Path) -> list[str]:
    """Directories under ``root`` with a labels.json that are no framework of this evaluation (e.g. fixtures)."""
    return sorted(p.parent.name for p in root.glob("*/labels.json") if p.parent.name not in EXPECTED)
