"""Framework views of a stored run: exactly what each framework would have logged, with its names,
signs, scales and cadence, derived from ``metrics.parquet`` (per update), ``steps.parquet`` (per
optimizer step / minibatch) and ``episodes.parquet`` (per finished episode, the monitor's return).

``render(run, profile) -> RawLog``: tidy records (``row, step, key, value``) in write order plus the
hyperparameters that framework's run carries (its own names). ``to_canonical(render(run, p), p)``
gives the same frame as reading an exported file of that view back. The label (fault, onset,
control flag, variant) is never part of a view.

Where a framework logs a quantity the store does not hold, the view leaves it out (listed in
:data:`NOT_DERIVABLE`) rather than approximating it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.config import ConfigError, visible_config
from harness.logs.profiles import load_profile
from harness.logs.readers import RawLog, records_frame
from harness.metrics import INDEX_COLUMNS
from harness.store import RunStore

#: what each framework logs that the run store cannot give exactly (left out of its view)
NOT_DERIVABLE = {
    "cleanrl": ["charts/SPS (wall clock)"],
    "sb3": ["time/fps, time/time_elapsed (wall clock)", "train/std (Gaussian log_std is not stored)"],
    "trl": ["completions/min_length, max_length, *_terminated_length (only the mean length is stored)",
            "clip_ratio/low_min, clip_ratio/high_max (per-sequence clip shares are not stored)",
            "rewards/<fn>/std, num_tokens, step_time"],
    "verl": ["critic/score|rewards|advantages|returns|values max/min, response_length/max|min",
             "actor/pg_clipfrac_lower (dual-clip share)", "timing_s/*, perf/*",
             "critic/advantages/mean for GRPO is verl's token-weighted mean; the store has the per-completion mean",
             "actor/entropy with entropy_coeff == 0 is verl's pre-update entropy over the rollout; the view "
             "uses the update's minibatch mean"],
}


@dataclass
class StoredRun:
    """One stored run, as the views read it."""

    meta: dict[str, Any]
    metrics: pd.DataFrame
    steps: pd.DataFrame
    episodes: pd.DataFrame

    @classmethod
    def load(cls, store: RunStore | str | Path, run_id: str) -> StoredRun:
        store = store if isinstance(store, RunStore) else RunStore(store)
        meta = store.load_meta(run_id)
        if meta is None:
            problem = store.problem(run_id)
            raise ConfigError(f"run {run_id} cannot be read: {problem}")
        return cls(meta, store.load_metrics(run_id), store.load_steps(run_id), store.load_episodes(run_id))

    @property
    def algo(self) -> str:
        return self.meta["algo"]

    def hp(self, which: str = "effective") -> dict[str, Any]:
        return (self.meta.get("hyperparameters") or {}).get(which) or {}

    def configured(self) -> dict[str, Any]:
        """What the user's config holds (the detector-visible whitelist)."""
        return visible_config(self.algo, self.hp("configured"))

    def batch_size(self) -> int:
        """Env steps per update as SB3 / CleanRL count them (every env.step of every env)."""
        hp = self.hp()
        return int(hp["num_envs"]) * int(hp["n_steps"])

    def update_steps(self, update: int) -> pd.DataFrame:
        """The per-minibatch rows of update ``update``, in stored order."""
        return _rows_of(self.steps, self._steps_at, update)

    def update_episodes(self, update: int) -> pd.DataFrame:
        """The episodes that finished during update ``update``, in stored order."""
        return _rows_of(self.episodes, self._episodes_at, update)

    @cached_property
    def _steps_at(self) -> dict[Any, np.ndarray]:
        return self.steps.groupby("update", sort=False).indices if len(self.steps) else {}

    @cached_property
    def _episodes_at(self) -> dict[Any, np.ndarray]:
        return self.episodes.groupby("update", sort=False).indices if len(self.episodes) else {}


def _rows_of(frame: pd.DataFrame, positions: dict[Any, np.ndarray], update: int) -> pd.DataFrame:
    """``frame[frame["update"] == update]`` from positions grouped once (a view reads every update)."""
    at = positions.get(update)
    return frame.iloc[at] if at is not None else frame.iloc[0:0]


class Records:
    """Accumulates (row, step, key, value) in write order."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, str, float]] = []
        self.row = -1

    def new_row(self) -> None:
        self.row += 1

    def add(self, step: float, key: str, value: float) -> None:
        if value is None:
            return
        self.rows.append((float(self.row), float(step), key, float(value)))

    def frame(self) -> pd.DataFrame:
        return records_frame(self.rows)


def _get(row: pd.Series, col: str) -> float | None:
    """A stored value, or None when the store has no such column (an older run, a metric another
    algorithm records): the view then leaves the key out."""
    return row[col] if col in row.index else None


def _mean(values: pd.Series | None) -> float | None:
    if values is None:
        return None
    return float(np.mean(values.to_numpy(dtype=float))) if len(values) else math.nan


def _col(frame: pd.DataFrame, col: str) -> pd.Series | None:
    return frame[col] if col in frame.columns else None


def _sum(values: pd.Series | None) -> float | None:
    return None if values is None else float(np.sum(values.to_numpy(dtype=float)))


def _framework_config(profile_name: str, configured: dict[str, Any]) -> dict[str, Any]:
    """The configured hyperparameters under the framework's own names (inverse of the profile's map)."""
    names = load_profile(profile_name).hyperparameters
    inverse = {}
    for fw_name, harness_name in names.items():
        inverse.setdefault(harness_name, fw_name)
    if profile_name in ("verl",) and "n_epochs" in configured:
        configured = {**configured, "num_iterations": configured["n_epochs"]}
    return {inverse[k]: v for k, v in configured.items() if k in inverse}


# ---- canonical -----------------------------------------------------------------------------
def render_canonical(run: StoredRun) -> RawLog:
    """Everything as stored (minus ``fault_active``, which would reveal the onset); step = update."""
    rec = Records()
    metrics = run.metrics
    columns = [c for c in metrics.columns if c not in INDEX_COLUMNS and metrics[c].notna().any()]
    for _, row in metrics.iterrows():
        rec.new_row()
        step = int(row["update"])
        rec.add(step, "update", step)
        rec.add(step, "env_step", _get(row, "env_step"))
        for col in columns:
            rec.add(step, col, row[col])
    return RawLog(rec.frame(), dict(run.configured()), "canonical view", "memory")


# ---- episode monitors (CleanRL's RecordEpisodeStatistics, SB3's Monitor) ----------------------------
def monitor_inside(run_id: str) -> bool:
    """Whether a view renders the run with its episode monitor inside the reward wrappers a fault adds
    (deterministically half of the runs, by run id)."""
    return hashlib.sha256(f"{run_id}/monitor-inside".encode()).digest()[0] % 2 == 0


def logged_returns(run: StoredRun) -> pd.Series:
    """Each finished episode's return as the framework's episode monitor logs it. Users add reward
    wrappers on either side of it: outside (the monitor logs the env's own return, ``env_return``) or
    inside (it logs the wrapped reward the learner trains on, ``return``: a zeroed, negated or rescaled
    reward shows in the logged returns). Half the runs are rendered each way (:func:`monitor_inside`);
    a run whose rewards are normalised after the wrappers always shows the env's own return (its
    learner's return is the normalised one, which no monitor logs). Without a reward wrapper the two
    are the same."""
    eps = run.episodes
    inside = (monitor_inside(str(run.meta.get("run_id", ""))) and "return" in eps.columns
              and not bool(run.hp().get("norm_reward", False)))
    return eps["return" if inside else "env_return"]


# ---- CleanRL ---------------------------------------------------------------------------------
def _episode_steps(run: StoredRun) -> pd.Series:
    """Each episode's global_step as CleanRL / SB3 count env steps: the update's first step plus the
    episode's position in that rollout (exact for backend=sb3; native counts valid steps only)."""
    batch = run.batch_size()
    ends = dict(zip(run.metrics["update"], run.metrics["env_step"]))
    eps = run.episodes
    start = eps["update"].map(lambda u: ends.get(u - 1, 0))
    return eps["update"] * batch + (eps["env_step"] - start)


def render_cleanrl(run: StoredRun) -> RawLog:
    """cleanrl/ppo.py: episodes at their global_step during the rollout; then, per update, the last
    minibatch's losses and KLs, clip fraction averaged over all minibatches and epochs."""
    rec = Records()
    batch = run.batch_size()
    ep_steps = _episode_steps(run) if len(run.episodes) else pd.Series(dtype=float)
    returns = logged_returns(run) if len(run.episodes) else pd.Series(dtype=float)
    for _, m in run.metrics.iterrows():
        u = int(_get(m, "update"))
        eps = run.update_episodes(u)
        for i, ep in eps.iterrows():
            rec.new_row()
            rec.add(ep_steps[i], "charts/episodic_return", returns[i])
            rec.add(ep_steps[i], "charts/episodic_length", _get(ep, "length"))
        s = run.update_steps(u)
        if s.empty:
            continue
        last = s.iloc[-1]
        step = (u + 1) * batch
        rec.new_row()
        rec.add(step, "charts/learning_rate", _get(m, "lr"))
        rec.add(step, "losses/value_loss", 0.5 * _get(last, "value_loss"))
        rec.add(step, "losses/policy_loss", _get(last, "policy_loss"))
        rec.add(step, "losses/entropy", _get(last, "entropy"))
        rec.add(step, "losses/old_approx_kl", _get(last, "kl_k1"))
        rec.add(step, "losses/approx_kl", _get(last, "approx_kl"))
        rec.add(step, "losses/clipfrac", _mean(_col(s, "clipfrac")))
        rec.add(step, "losses/explained_variance", _get(m, "explained_variance"))
    return RawLog(rec.frame(), _framework_config("cleanrl", run.configured()), "cleanrl view", "memory")


# ---- stable-baselines3 -----------------------------------------------------------------------
def render_sb3(run: StoredRun) -> RawLog:
    """SB3 PPO with log_interval=1: the dump at iteration i (after rollout i, before its train())
    holds rollout/* over the last 100 Monitor episodes so far and the train/* of update i - 2."""
    rec = Records()
    batch = run.batch_size()
    metrics = run.metrics.set_index("update")
    episodes = run.episodes.assign(logged=logged_returns(run)) if len(run.episodes) else run.episodes
    n_updates = 0
    for i in range(1, len(run.metrics) + 1):
        rec.new_row()
        step = i * batch
        if i >= 2:
            u = i - 2
            s = run.update_steps(u)
            m = metrics.loc[u]
            if not s.empty:
                n_updates += int(s["epoch"].max()) + 1
                last_epoch = s[s["epoch"] == s["epoch"].max()]
                rec.add(step, "train/learning_rate", _get(m, "lr"))
                rec.add(step, "train/entropy_loss", _mean(-s["entropy"] if "entropy" in s.columns else None))
                rec.add(step, "train/policy_gradient_loss", _mean(_col(s, "policy_loss")))
                rec.add(step, "train/value_loss", _mean(_col(s, "value_loss")))
                rec.add(step, "train/approx_kl", _mean(_col(last_epoch, "approx_kl")))
                rec.add(step, "train/clip_fraction", _mean(_col(s, "clipfrac")))
                rec.add(step, "train/loss", s["loss"].iloc[-1] if "loss" in s.columns else None)
                rec.add(step, "train/explained_variance", _get(m, "explained_variance"))
                rec.add(step, "train/n_updates", n_updates)
                rec.add(step, "train/clip_range", _get(m, "clip_range"))
        rec.add(step, "time/iterations", i)
        window = episodes[episodes["update"] <= i - 1].tail(100)
        if len(window):
            rec.add(step, "rollout/ep_rew_mean", _mean(window["logged"]))
            rec.add(step, "rollout/ep_len_mean", _mean(window["length"]))
        rec.add(step, "time/total_timesteps", step)
    return RawLog(rec.frame(), {}, "sb3 view", "memory")


# ---- TRL GRPOTrainer -------------------------------------------------------------------------
def render_trl(run: StoredRun) -> RawLog:
    """GRPOTrainer with logging_steps=1, gradient_accumulation_steps=1 and steps_per_generation =
    the run's minibatches: one log_history row per optimizer step (global_step counts them); the
    generation metrics only on the first step after each generation; kl only when beta != 0."""
    rec = Records()
    hp = run.hp()
    beta, ent_coef = float(hp.get("beta", 0.0)), float(hp.get("ent_coef", 0.0))
    batch_std = hp.get("scale") == "batch"
    reward_fns = [c for c in run.metrics.columns if c.startswith("reward/")]
    total = len(run.steps)
    global_step, losses = 0, []
    metrics = run.metrics.set_index("update")
    for u in metrics.index:
        m = metrics.loc[u]
        for k, (_, row) in enumerate(run.update_steps(u).iterrows()):
            global_step += 1
            rec.new_row()
            loss = float(row["loss"])              # transformers 5.x logs it unrounded (4.x: round(.., 4))
            losses.append(loss)
            rec.add(global_step, "loss", loss)
            rec.add(global_step, "grad_norm", _get(row, "grad_norm"))
            rec.add(global_step, "learning_rate", _get(row, "lr"))
            if k == 0:                             # the step that generated this batch's completions
                rec.add(global_step, "completions/mean_length", _get(m, "length_mean"))
                rec.add(global_step, "completions/clipped_ratio", _get(m, "response_clip_ratio"))
                for col in reward_fns:
                    rec.add(global_step, f"rewards/{col.split('/', 1)[1]}/mean", m[col])
                rec.add(global_step, "reward", _get(m, "reward_mean"))
                rec.add(global_step, "reward_std", _get(m, "reward_std"))
                zero_std = float(abs(_get(m, "reward_std")) <= 1e-8) if batch_std else _get(m, "frac_reward_zero_std")
                rec.add(global_step, "frac_reward_zero_std", zero_std)
                for col, key in (("sampler_logp_diff_mean", "sampling/sampling_logp_difference/mean"),
                                 ("sampler_logp_diff_max", "sampling/sampling_logp_difference/max")):
                    if col in m.index and np.isfinite(m[col]):
                        rec.add(global_step, key, m[col])
            if ent_coef != 0:
                rec.add(global_step, "policy_loss", _get(row, "policy_loss"))
            if beta != 0:
                rec.add(global_step, "kl", _get(row, "kl_ref"))
            rec.add(global_step, "entropy", _get(row, "entropy"))
            rec.add(global_step, "clip_ratio/low_mean", _get(row, "clip_low_frac"))
            rec.add(global_step, "clip_ratio/high_mean", _get(row, "clip_high_frac"))
            if "clip_low_frac" in row.index and "clip_high_frac" in row.index:     # disjoint: low or high
                rec.add(global_step, "clip_ratio/region_mean", row["clip_low_frac"] + row["clip_high_frac"])
            rec.add(global_step, "epoch", global_step / total)
    if global_step:                               # Trainer's end-of-training summary: not a step
        rec.new_row()
        rec.add(global_step, "train_loss", float(np.mean(losses)))
        rec.add(global_step, "epoch", 1.0)
    config = _framework_config("trl", run.configured())
    config.update(steps_per_generation=int(hp["n_minibatches"]), gradient_accumulation_steps=1, logging_steps=1,
                  generation_batch_size=int(hp["n_prompts"]) * int(hp["group_size"]),
                  loss_type={"token_mean": "dapo", "seq_mean": "grpo"}.get(hp.get("loss_agg"), hp.get("loss_agg")))
    config["scale_rewards"] = run.configured().get("scale", "group")
    return RawLog(rec.frame(), config, "trl view", "memory")


# ---- TRL PPOTrainer -------------------------------------------------------------------------
def render_trl_ppo(run: StoredRun) -> RawLog:
    """A PPO-LM run as TRL's PPOTrainer (0.12+) logs it: one Trainer.log row per update (step from 1),
    the policy and value statistics averaged over the update's minibatches and epochs, the value loss
    as 0.5 x the clipped MSE, objective/* from the batch, val/num_eos_tokens the batch's EOS count."""
    rec = Records()
    hp = run.hp()
    batch = int(hp["n_prompts"]) * int(hp.get("group_size", 1))
    for _, m in run.metrics.iterrows():
        step = int(_get(m, "update")) + 1
        rec.new_row()
        rec.add(step, "eps", 0)
        rec.add(step, "objective/kl", _get(m, "kl_ref_sum"))
        rec.add(step, "objective/non_score_reward", _get(m, "non_score_reward"))
        rec.add(step, "objective/rlhf_reward", _get(m, "rlhf_reward"))
        rec.add(step, "objective/scores", _get(m, "reward_mean"))
        rec.add(step, "policy/approxkl_avg", _get(m, "approx_kl"))
        rec.add(step, "policy/clipfrac_avg", _get(m, "clipfrac_binding"))
        rec.add(step, "loss/policy_avg", _get(m, "policy_loss"))
        value_loss = _get(m, "value_loss")
        rec.add(step, "loss/value_avg", None if value_loss is None else 0.5 * value_loss)
        rec.add(step, "val/clipfrac_avg", _get(m, "value_clipfrac"))
        rec.add(step, "policy/entropy_avg", _get(m, "entropy"))
        rec.add(step, "val/ratio", _get(m, "ratio_mean"))
        rec.add(step, "val/ratio_var", _get(m, "ratio_var"))
        clipped = _get(m, "response_clip_ratio")
        rec.add(step, "val/num_eos_tokens", None if clipped is None else round(batch * (1.0 - clipped)))
        rec.add(step, "lr", _get(m, "lr"))
        rec.add(step, "episode", step * batch)
    config = _framework_config("trl_ppo", run.configured())
    config.update(per_device_train_batch_size=batch, logging_steps=1)
    return RawLog(rec.frame(), config, "trl_ppo view", "memory")


# ---- verl ----------------------------------------------------------------------------------
def render_verl(run: StoredRun) -> RawLog:
    """One row per global step (from 1): actor/pg_loss and actor/kl_loss summed over mini-batches
    and epochs, the other actor metrics averaged; critic/* and response_length/* from the rollout."""
    rec = Records()
    hp = run.hp()
    grpo = run.algo == "grpo"
    # verl's PPO whitens its GAE advantages before logging their mean: a PPO-LM run's raw mean is not shown
    shown_adv = None if run.algo == "ppo_lm" else "adv_mean"
    task = ((run.meta.get("config") or {}).get("env") or {}).get("kwargs") or {}
    # <s> and min_prompt_len..prompt_len digits, uniformly (harness/envs/toyseq.py)
    prompt_tokens = 1 + (task.get("min_prompt_len", 2) + task.get("prompt_len", 5)) / 2
    beta = float(hp.get("beta", 0.0)) if grpo else 0.0
    for _, m in run.metrics.iterrows():
        u = int(_get(m, "update"))
        s = run.update_steps(u)
        step = u + 1
        rec.new_row()
        if not grpo and not s.empty:
            rec.add(step, "critic/vf_loss", _sum(0.5 * s["value_loss"] if "value_loss" in s.columns else None))
        if not s.empty:
            rec.add(step, "actor/pg_loss", _sum(_col(s, "policy_loss")))
            kl = _sum(_col(s, "kl_ref")) if beta != 0 else 0.0
            rec.add(step, "actor/kl_loss", kl)
            rec.add(step, "actor/pg_clipfrac", _mean(_col(s, "clipfrac_binding")))
            rec.add(step, "actor/ppo_kl", _mean(_col(s, "kl_k1")))
            rec.add(step, "actor/entropy", _mean(_col(s, "entropy")))
            if beta != 0:
                rec.add(step, "actor/kl_coef", beta)
            rec.add(step, "actor/grad_norm", _mean(_col(s, "grad_norm")))
        rec.add(step, "actor/lr", _get(m, "lr"))
        rec.add(step, "training/global_step", step)
        rec.add(step, "training/epoch", 0)
        rec.add(step, "critic/score/mean", _get(m, "reward_mean"))
        rec.add(step, "critic/rewards/mean", _get(m, "reward_mean"))
        rec.add(step, "critic/advantages/mean", 0.0 if shown_adv is None else _get(m, shown_adv))
        if not grpo:
            rec.add(step, "critic/values/mean", _get(m, "value_mean"))
            rec.add(step, "critic/vf_explained_var", _get(m, "explained_variance"))
        if run.algo == "ppo_lm":
            rec.add(step, "critic/vf_clipfrac", _mean(_col(s, "value_clipfrac")))
            rec.add(step, "prompt_length/mean", prompt_tokens)
        if run.algo in ("grpo", "ppo_lm"):
            rec.add(step, "response_length/mean", _get(m, "length_mean"))
            rec.add(step, "response_length/clip_ratio", _get(m, "response_clip_ratio"))
    return RawLog(rec.frame(), _framework_config("verl", run.configured()), "verl view", "memory")


VIEWS: dict[str, Callable[[StoredRun], RawLog]] = {
    "canonical": render_canonical, "cleanrl": render_cleanrl, "sb3": render_sb3, "trl": render_trl,
    "trl_ppo": render_trl_ppo, "verl": render_verl,
}


def applies(profile: str, algo: str) -> bool:
    return algo in load_profile(profile).algos


def render(run: StoredRun, profile: str) -> RawLog:
    """The log ``profile``'s framework would have written for this run (ConfigError, one line, when the
    framework does not run this algorithm: SB3 / CleanRL are PPO, TRL's GRPOTrainer is GRPO)."""
    if profile not in VIEWS:
        raise ConfigError(f"unknown profile {profile!r}; valid choices: {', '.join(sorted(VIEWS))}")
    prof = load_profile(profile)
    if run.algo not in prof.algos:
        raise ConfigError(f"profile={profile} ({prof.framework}) logs {'/'.join(a.upper() for a in prof.algos)} "
                          f"runs only; this run is {run.algo.upper()}")
    raw = VIEWS[profile](run)
    raw.source = f"{profile} view of a stored {run.algo} run"
    return raw
