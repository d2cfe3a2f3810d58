"""The canonical metric names (docs/design.md), one row per update; NaN where one does not apply."""

from __future__ import annotations

INDEX_COLUMNS = ("update", "env_step", "fault_active")

#: name -> definition, in the order of the table in docs/design.md
CANONICAL: dict[str, str] = {
    "reward_mean": "mean reward per env step (PPO) or per completion (GRPO) in this update's rollout",
    "return_mean": "mean return of the episodes / completions finished in this rollout",
    "return_std": "std of those returns",
    "length_mean": "mean length of those episodes / completions",
    "adv_mean": "mean of the raw advantages, before any normalisation",
    "adv_std": "std of the raw advantages",
    "value_mean": "mean critic value over the rollout (PPO)",
    "explained_variance": "1 - Var(returns - V) / Var(returns) over the rollout (PPO)",
    "policy_loss": "clipped surrogate loss, mean over all minibatches and epochs",
    "value_loss": "critic MSE (no 1/2), mean over all minibatches and epochs",
    "entropy": "policy entropy, mean over all minibatches and epochs",
    "loss": "total back-propagated loss, mean over all minibatches and epochs",
    "approx_kl": "k3 = mean((r - 1) - log r), old -> new, over all minibatches and epochs",
    "kl_k1": "mean(old_logp - logp); can be negative",
    "clipfrac": "mean(|r - 1| > clip_range) (SB3/CleanRL convention)",
    "clipfrac_binding": "share of samples where the clipped term is the one used (TRL/verl convention)",
    "ratio_mean": "mean importance ratio r = exp(logp - old_logp)",
    "ratio_min": "minimum ratio over the update",
    "ratio_max": "maximum ratio over the update",
    "ratio_dev_max": "max |r - 1| over the update",
    "grad_norm": "total L2 gradient norm before clipping, mean over optimizer steps",
    "grad_norm_max": "max of that norm over optimizer steps",
    "optimizer_steps": "optimizer.step() calls in this update",
    "lr": "effective learning rate",
    "clip_range": "effective clip range",
    "param_delta": "L2 norm of the parameter change over the update",
    "nonfinite": "1 when a loss, gradient or parameter became NaN/Inf",
    "kl_ref": "GRPO: k3 KL to the frozen reference policy, token mean",
    "reward_std": "GRPO: std of rewards over the batch",
    "group_reward_std_mean": "GRPO: mean within-group reward std",
    "frac_reward_zero_std": "GRPO: share of groups whose rewards are all equal",
    "response_clip_ratio": "GRPO: share of completions cut at the maximum length",
    "logp_mean": "GRPO: mean sequence log-prob under the policy",
    "logp_ref_mean": "GRPO: mean sequence log-prob under the reference",
    "terminated_length_mean": "GRPO: mean length of the completions that ended with EOS, EOS included "
                              "(TRL completions/mean_terminated_length; NaN when none did)",
    "sampler_logp_diff_mean": "GRPO: mean over real tokens of |logp_sampler - logp_trainer|, trainer at the "
                              "rollout weights (TRL sampling/sampling_logp_difference/mean)",
    "sampler_logp_diff_max": "GRPO: max over real tokens of |logp_sampler - logp_trainer| "
                             "(TRL sampling/sampling_logp_difference/max)",
    "sampler_ratio_oob": "GRPO: share of real tokens whose exp(logp_trainer - logp_sampler) is outside [0.9, 1.1]",
    "kl_sampler": "GRPO: k3 KL between sampler and trainer log-probs, token mean (verl rollout_corr, "
                  "NeMo-RL gen_kl_error)",
    "value_clipfrac": "PPO-LM: share of real tokens whose clipped value error is the larger of the two, mean over "
                      "minibatches and epochs (TRL val/clipfrac_avg, verl critic/vf_clipfrac)",
    "ratio_var": "PPO-LM: variance over the update's minibatches of their mean ratio (TRL val/ratio_var)",
    "kl_ref_sum": "PPO-LM: KL to the frozen reference at the rollout, k1 = logp - logp_ref summed over each "
                  "completion's tokens, mean over completions (TRL objective/kl)",
    "non_score_reward": "PPO-LM: the KL penalty in the reward, -kl_coef x k1 summed over each completion, mean over "
                        "completions (TRL objective/non_score_reward)",
    "rlhf_reward": "PPO-LM: reward_mean + non_score_reward, the per-completion return the policy maximises "
                   "(TRL objective/rlhf_reward)",
    "kl_coef": "PPO-LM: the KL penalty coefficient of this update's reward, fixed or adaptive (old TRL "
               "objective/kl_coef)",
}

#: per reward function, when several are summed (GRPO): ``reward/<fn>`` = the function's mean over the
#: batch, unweighted (TRL rewards/<fn>/mean). The names depend on the task, so these columns are dynamic.
REWARD_FN_PREFIX = "reward/"

GRPO_ONLY = ("kl_ref", "reward_std", "group_reward_std_mean", "frac_reward_zero_std",
             "response_clip_ratio", "logp_mean", "logp_ref_mean", "terminated_length_mean",
             "sampler_logp_diff_mean", "sampler_logp_diff_max", "sampler_ratio_oob", "kl_sampler")
PPO_ONLY = ("value_mean", "explained_variance", "value_loss")
#: only PPO on token tasks with a value model (algo=ppo_lm, harness/agents/ppo_lm.py) records these
PPO_LM_ONLY = ("value_clipfrac", "ratio_var", "kl_ref_sum", "non_score_reward", "rlhf_reward", "kl_coef")
#: GRPO metrics PPO-LM does not record: its own sampler's gap, the reward groups, the update-time kl_ref
NOT_PPO_LM = ("kl_ref", "group_reward_std_mean", "frac_reward_zero_std", "sampler_logp_diff_mean",
              "sampler_logp_diff_max", "sampler_ratio_oob", "kl_sampler")
#: metrics only a clipped-surrogate learner (PPO, GRPO) logs: a log with none of them is another algorithm's
SURROGATE_ONLY = ("approx_kl", "kl_k1", "clipfrac", "clipfrac_binding", "clip_low_frac", "clip_high_frac",
                  "clip_range", "ratio_mean", "ratio_min", "ratio_max", "ratio_dev_max")

COLUMNS = (*INDEX_COLUMNS, *CANONICAL)

#: the learning-progress metric of each algorithm (episode return / completion reward)
PROGRESS = {"ppo": "return_mean", "grpo": "reward_mean", "ppo_lm": "reward_mean"}


def applicable(algo: str) -> tuple[str, ...]:
    """The canonical metrics an algorithm records (the rest are NaN)."""
    if algo == "ppo_lm":
        skip = NOT_PPO_LM
    else:
        skip = (*(GRPO_ONLY if algo == "ppo" else PPO_ONLY), *PPO_LM_ONLY)
    return tuple(m for m in CANONICAL if m not in skip)


#: per optimizer step (one row per minibatch evaluated; ``steps.parquet``): what each framework's
#: logging is derived from (CleanRL logs the last minibatch, SB3 the last epoch's KL, ...)
STEP_METRICS: dict[str, str] = {
    "epoch": "epoch (PPO) / iteration (GRPO) index within the update",
    "minibatch": "minibatch index within the epoch",
    "n_samples": "samples (PPO) / completions (GRPO) in the minibatch",
    "n_tokens": "real tokens in the minibatch (GRPO; PPO: = n_samples)",
    "policy_loss": "clipped surrogate loss of the minibatch",
    "value_loss": "critic MSE of the minibatch (PPO; no 1/2)",
    "entropy": "policy entropy of the minibatch",
    "loss": "back-propagated loss of the minibatch",
    "approx_kl": "k3 of the minibatch",
    "kl_k1": "k1 of the minibatch",
    "clipfrac": "mean(|r - 1| > clip_range) over the minibatch",
    "clipfrac_binding": "share where the clipped term is used",
    "clip_low_frac": "share with r < 1 - clip_range and A < 0 (TRL clip_ratio/low)",
    "clip_high_frac": "share with r > 1 + clip_range and A > 0 (TRL clip_ratio/high)",
    "ratio_mean": "mean ratio of the minibatch",
    "ratio_min": "min ratio of the minibatch",
    "ratio_max": "max ratio of the minibatch",
    "ratio_dev_max": "max |r - 1| of the minibatch",
    "kl_ref": "GRPO: k3 KL to the reference, token mean over the minibatch",
    "value_clipfrac": "PPO-LM: share of the minibatch's real tokens whose clipped value error is the larger",
    "grad_norm": "total L2 gradient norm before clipping (NaN when no backward pass ran)",
    "lr": "learning rate of this step",
    "clip_range": "clip range of this step",
    "stepped": "1 if optimizer.step() ran for this minibatch",
    "nonfinite": "1 if the loss or gradient was NaN/Inf",
}
STEP_COLUMNS = ("update", *STEP_METRICS)

#: per finished episode (PPO; ``episodes.parquet``): episode statistics as a monitor sees them
EPISODE_METRICS: dict[str, str] = {
    "env_step": "env steps (all envs, valid steps only) when the episode ended",
    "return": "sum of the rewards the learner received (after any reward wrapper of a fault)",
    "env_return": "sum of the environment's own rewards, as a monitor inside the fault's wrappers "
                  "records them (SB3 Monitor, gymnasium RecordEpisodeStatistics)",
    "length": "episode length in steps",
}
EPISODE_COLUMNS = ("update", *EPISODE_METRICS)


#: canonical metrics whose being logged as NaN or inf marks a diverged run (the ``nonfinite`` column of a
#: log that has none of its own; a metric a row does not log is no value at all)
WATCHED = ("loss", "policy_loss", "value_loss", "grad_norm", "approx_kl", "kl_k1", "entropy", "ratio_mean",
           "ratio_max", "kl_ref", "adv_mean", "adv_std")
