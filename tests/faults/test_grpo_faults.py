"""What particular GRPO faults do, beyond acting from their onset (test_every_fault.py): the sampler/trainer
log-prob gaps, the completion masks, gradient accumulation, the reference and its KL, the advantage
estimators' maths. Each checks its mechanism on a short real run against its healthy twin (which shares
the fault's setting; tests/faults/setups.py), sharing the per-fault check's runs where they show it; the
claims that need long runs are in the slow tier."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest
import torch

from faults import FAULTS
from harness.agents.core import MinibatchEval, ppo_update
from harness.analysis.signatures import evaluate
from harness.config import ConfigError
from harness.hooks import HEALTHY
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import RunResult
from harness.store import RunStore
from tests.faults.setups import FAST_GRPO, ONSET, fast_grpo, fast_pair, grpo_pair, slow_overrides
from tests.helpers import train, train_with_twin

B = 16 * 8                                                                # n_prompts x group_size


def fires(run: RunResult, name: str) -> bool:
    return evaluate(run.metrics, run.meta, names=[name])[name].fired


def first_epoch_tokens(store_dir, run: RunResult) -> np.ndarray:
    """Tokens in the trainer's mask per update (the minibatches of the first epoch cover the batch once)."""
    steps = RunStore(store_dir).load_steps(run.run_id)
    return steps[steps["epoch"] == 0].groupby("update")["n_tokens"].sum().to_numpy()


def active(run: RunResult) -> pd.DataFrame:
    return run.metrics[run.metrics["fault_active"]]


def test_untempered_logprobs_trainer_disagrees_with_the_sampler(store_dir):
    fault, twin = fast_pair(store_dir, "untempered_logprobs")
    for run in (fault, twin):                              # the setting: both sample at T = 0.7
        assert run.meta["hyperparameters"]["configured"]["temperature"] == 0.7
    f, t = active(fault), twin.metrics
    assert (t["sampler_logp_diff_mean"] < 1e-4).all()      # fp32 sampler and trainer agree at the same T
    assert (f["sampler_logp_diff_mean"] > 0.05).all() and (f["kl_sampler"] > 0.01).all()
    # the trainer's log-probs are those of the flatter T = 1 distribution: lower on the sampled tokens
    assert f["logp_mean"].iloc[0] < t["logp_mean"].iloc[ONSET]
    with pytest.raises(ConfigError, match="temperature=1.0"):
        FAULTS["untempered_logprobs"](temperature=1.0)
    for name in FAULTS["untempered_logprobs"].expected:
        assert fires(fault, name) and not evaluate(twin.metrics, twin.meta, onset=ONSET, names=[name])[name].fired


def test_dropout_in_logprob_makes_old_logprobs_noisy(store_dir):
    fault, twin = fast_pair(store_dir, "dropout_in_logprob")
    for run in (fault, twin):                              # the setting: both models have dropout 0.1
        assert run.meta["hyperparameters"]["configured"]["dropout"] == 0.1
    f, t = active(fault), twin.metrics
    # the sampler generates in eval mode; the twin's old pass agrees with it, the fault's does not
    assert (t["sampler_logp_diff_mean"] < 1e-4).all() and (f["sampler_logp_diff_mean"] > 0.01).all()
    # two dropout masks (old and new pass) instead of one: the ratio is further from 1 from the first minibatch
    steps_f, steps_t = (RunStore(store_dir).load_steps(r.run_id) for r in (fault, twin))
    first = (steps_f["update"] == ONSET) & (steps_f["epoch"] == 0)
    assert steps_f[first]["approx_kl"].mean() > 1.5 * steps_t[first]["approx_kl"].mean()
    assert f["approx_kl"].median() > t["approx_kl"].iloc[ONSET:].median()
    assert fires(fault, "kl_sampler_high")
    assert not evaluate(twin.metrics, twin.meta, onset=ONSET, names=["kl_sampler_high"])["kl_sampler_high"].fired
    # only the reference pass: the old log-probs agree with the sampler again
    ref_only = fast_grpo(store_dir, "fault=dropout_in_logprob", "fault.passes=ref", "env.total_timesteps=2560")
    assert (ref_only.metrics["sampler_logp_diff_mean"] < 1e-4).all()


def test_eos_masked_drops_exactly_the_eos_tokens(store_dir):
    fault, twin = fast_pair(store_dir, "eos_masked")
    for run in (fault, twin):
        m = run.metrics
        generated = m["length_mean"].to_numpy() * B
        ended = (1 - m["response_clip_ratio"].to_numpy()) * B          # completions that emitted EOS
        trained = first_epoch_tokens(store_dir, run)
        masked = m["fault_active"].to_numpy() & (run is fault)
        expected = np.where(masked, generated - ended, generated)
        assert trained == pytest.approx(expected, abs=0.5), run.run_id
    hook = FAULTS["eos_masked"]()
    tokens = torch.tensor([[5, 6, 2, 1], [5, 5, 5, 5]])                  # eos=2, pad=1; the second is truncated
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    assert hook.completion_mask(mask, tokens, 2, 1).tolist() == [[True, True, False, False], [True] * 4]


def test_post_eos_unmasked_keeps_padding_only_where_the_completion_has_no_eos(store_dir):
    """verl's mask from EOS positions alone (verl#3805): a completion that stopped on the second end
    token (the setting: generation also stops at </a>, for the run and its twin) keeps its padding;
    one that ended on EOS, or was cut at the length limit, is masked as before."""
    hook = FAULTS["post_eos_unmasked"]()
    # eos=2, pad=0, </a>=4: ended on EOS / stopped at </a> / cut at the limit
    tokens = torch.tensor([[3, 5, 4, 2, 0, 0], [3, 5, 4, 0, 0, 0], [3, 5, 5, 5, 5, 5]])
    healthy = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    got = hook.completion_mask(healthy, tokens, 2, 0)
    assert got[0].tolist() == healthy[0].tolist() and got[2].tolist() == healthy[2].tolist()
    assert got[1].all()                                                   # the padding after </a> joined the mask

    fault, twin = fast_pair(store_dir, "post_eos_unmasked")
    for run in (fault, twin):                                             # the setting: both stop at </a> too
        assert run.meta["hyperparameters"]["configured"]["stop_at_close"] is True
    on = fault.metrics["fault_active"].to_numpy()
    generated = fault.metrics["length_mean"].to_numpy() * B
    trained = first_epoch_tokens(store_dir, fault)
    assert (trained[on] > generated[on] + 0.5).all()                     # padding joined the mask
    assert trained[~on] == pytest.approx(generated[~on], abs=0.5)
    assert first_epoch_tokens(store_dir, twin) == pytest.approx(twin.metrics["length_mean"].to_numpy() * B, abs=0.5)
    # well-formed completions now end at </a> and are rewarded as such: the twin still learns the format
    assert twin.metrics["reward_mean"].iloc[0] > 0.3
    # the summed completion log-prob now includes padding the warm-up never produced
    f, t = fault.metrics.iloc[ONSET], twin.metrics.iloc[ONSET]
    assert f["logp_mean"] < t["logp_mean"] - 5
    assert fires(fault, "logp_per_token_low")
    assert not evaluate(twin.metrics, twin.meta, onset=ONSET, names=["logp_per_token_low"])["logp_per_token_low"].fired
    # generation is untouched: the rollout at the onset is the twin's
    assert f["length_mean"] == t["length_mean"] and f["reward_mean"] == t["reward_mean"]


def tiny_update(hooks, grad_accum: int, rows: torch.Tensor | None = None) -> torch.Tensor:
    """One optimizer step (SGD, lr 1) of ppo_update on a tiny categorical policy; the parameter change."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4)
    obs, actions, adv = torch.randn(16, 3), torch.randint(0, 4, (16,)), torch.randn(16)
    with torch.no_grad():
        logp = model(obs).log_softmax(-1).gather(-1, actions[:, None]).squeeze(-1)
    batch = {"obs": obs, "actions": actions, "logp": logp, "adv": adv}
    if rows is not None:
        batch = {k: v[rows] for k, v in batch.items()}

    def evaluate(mb):
        logits = model(mb["obs"]).log_softmax(-1)
        return MinibatchEval(logp=logits.gather(-1, mb["actions"][:, None]).squeeze(-1),
                             entropy=-(logits.exp() * logits).sum(-1))

    hp = types.SimpleNamespace(n_epochs=1, n_minibatches=1, lr=1.0, clip_range=0.2, ent_coef=0.0,
                               max_grad_norm=1e9, norm_adv=False, loss_agg="token_mean", grad_accum=grad_accum,
                               target_kl=None, log_ratio_clamp=0.0)
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    metrics, _ = ppo_update(model, optimizer, batch, hp, hooks, evaluate, torch.Generator().manual_seed(0))
    assert metrics["optimizer_steps"] == 1
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach() - before


def test_grad_accum_microbatch_dropped_steps_on_the_last_microbatch_only(store_dir):
    fault = FAULTS["grad_accum_microbatch_dropped"]()
    assert fault.setting() == {"grad_accum": 4}
    whole = tiny_update(HEALTHY, 1)
    assert tiny_update(HEALTHY, 4) == pytest.approx(whole, abs=1e-6)                 # healthy accumulation
    order = torch.randperm(16, generator=torch.Generator().manual_seed(0))           # ppo_update's minibatch order
    last = order[torch.arange(16).tensor_split(4)[-1]]
    dropped = tiny_update(fault, 4)
    # the step is the last micro-batch's gradient, weighted by its share (1/4) of the minibatch
    assert dropped == pytest.approx(0.25 * tiny_update(HEALTHY, 1, last), abs=1e-6)
    assert not torch.allclose(dropped, whole, atol=1e-4)
    # a real run: both have grad_accum=4; the fault's gradient is a quarter of the minibatch's, smaller
    run, twin = fast_pair(store_dir, "grad_accum_microbatch_dropped")
    for r in (run, twin):
        assert r.meta["hyperparameters"]["configured"]["grad_accum"] == 4
    assert active(run)["grad_norm"].median() < 0.7 * twin.metrics["grad_norm"].iloc[ONSET:].median()


def test_grad_accum_mean_of_means_weights_micro_batches_equally(store_dir):
    """Both runs accumulate 4 micro-batches of token-mean loss; the fault averages the micro-batches' own
    means: the same rollout at the onset, a different first minibatch loss (the micro-batches hold different
    numbers of tokens), and the hook gives every micro-batch 1/4 whatever its tokens."""
    fault = FAULTS["grad_accum_mean_of_means"]()
    assert fault.micro_share(0.4, 4) == fault.micro_share(0.1, 4) == 0.25
    faulty, twin = fast_pair(store_dir, "grad_accum_mean_of_means")
    for run in (faulty, twin):
        hp = run.meta["hyperparameters"]["configured"]
        assert hp["grad_accum"] == 4 and hp["loss_agg"] == "token_mean"
    f, t = faulty.metrics.iloc[ONSET], twin.metrics.iloc[ONSET]
    assert f["reward_mean"] == t["reward_mean"] and f["length_mean"] == t["length_mean"]
    steps_f, steps_t = (RunStore(store_dir).load_steps(r.run_id) for r in (faulty, twin))
    at_f, at_t = steps_f[steps_f["update"] == ONSET].iloc[0], steps_t[steps_t["update"] == ONSET].iloc[0]
    assert at_f["n_tokens"] == at_t["n_tokens"]                                  # the same first minibatch
    assert at_f["loss"] != pytest.approx(at_t["loss"], rel=1e-6)


def test_sampling_filter_not_replayed_biases_every_ratio_by_the_kept_mass(store_dir):
    """Both runs sample under top-p 0.9 and take the old log-probs from the sampler; the twin's trainer
    replays the truncation (its log-probs match the sampler's), the fault's scores the full vocabulary:
    every trainer log-prob is below the sampler's by log(kept mass), the ratio's mean sits below 1."""
    from harness.agents.lm import token_logprobs
    from harness.agents.sampler import filter_logits

    logits = torch.randn(4, 6, 12, generator=torch.Generator().manual_seed(0))
    tokens = filter_logits(logits, 0, 0.9).softmax(-1).argmax(-1)            # tokens inside the kept set
    kept, _ = token_logprobs(logits, tokens, 1.0, 0, 0.9)
    full, _ = token_logprobs(logits, tokens, 1.0)
    assert (kept >= full).all() and (kept > full).any()                    # renormalised over the kept set
    faulty, twin = fast_pair(store_dir, "sampling_filter_not_replayed")
    for run in (faulty, twin):
        hp = run.meta["hyperparameters"]["configured"]
        assert hp["top_p"] == 0.9 and hp["use_sampler_logprobs"] is True and run.meta["status"] == "ok"
    f, t = active(faulty), twin.metrics
    assert (t["sampler_logp_diff_mean"] < 1e-4).all() and (f["sampler_logp_diff_mean"] > 0.01).all()
    assert f["ratio_mean"].median() < 0.97 < t["ratio_mean"].median()
    assert fires(faulty, "sampler_mismatch_high")
    assert not evaluate(twin.metrics, twin.meta, onset=ONSET, names=["sampler_mismatch_high"])[
        "sampler_mismatch_high"].fired


def test_rollout_precision_uncorrected_drops_only_the_correction(store_dir):
    """Both runs sample in bf16 beside the fp32 trainer and log the same gap at the first rollout; the
    twin's update carries verl's truncated importance sampling, the fault's config has none (what the
    user's config holds), so from the first update their steps differ."""
    faulty, twin = grpo_pair(store_dir, "rollout_precision_uncorrected")
    assert faulty.meta["hyperparameters"]["configured"]["is_correction"] == "none"       # misconfigured
    assert twin.meta["hyperparameters"]["configured"]["is_correction"] == "token_truncate"
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["sampler_precision"] == "bf16"
    f, t = faulty.metrics.iloc[0], twin.metrics.iloc[0]
    assert f["sampler_logp_diff_mean"] == t["sampler_logp_diff_mean"] > 1e-4            # the same bf16 gap
    assert f["param_delta"] != t["param_delta"]


def test_the_ratio_makes_a_kl_estimate_s_gradient_the_kl_s():
    """The premise of kl_gradient_biased, on a categorical policy where the reverse KL and its gradient
    are exact: on samples of the policy, the mean gradient of k3 (or k1) times the ratio (value 1,
    differentiable) matches grad KL(pi || ref); k3 alone does not, and k1 alone averages to ~0."""
    from harness.agents.grpo_math import kl_terms

    torch.manual_seed(0)
    logits = torch.randn(6, requires_grad=True)
    ref = torch.log_softmax(torch.randn(6), -1)
    logp_all = torch.log_softmax(logits, -1)
    exact = torch.autograd.grad((logp_all.exp() * (logp_all - ref)).sum(), logits)[0]
    samples = torch.distributions.Categorical(logits=logits.detach()).sample((400_000,))

    def mean_grad(estimator: str, weighted: bool) -> torch.Tensor:
        logp = torch.log_softmax(logits, -1)[samples]
        k = kl_terms(ref[samples] - logp, estimator)
        if weighted:
            k = k * (logp - logp.detach()).exp()
        return torch.autograd.grad(k.mean(), logits)[0]

    for estimator in ("k3", "k1"):
        assert torch.allclose(mean_grad(estimator, True), exact, atol=0.01), estimator
    assert (mean_grad("k3", False) - exact).abs().max() > 0.05
    assert mean_grad("k1", False).abs().max() < 0.01 < exact.abs().max()


@pytest.mark.parametrize("form", ["code bug", "misconfigured"])
def test_kl_gradient_biased_drops_only_the_ratio(store_dir, form):
    """Run and twin share the KL penalty (beta) and start alike; the twin's penalty carries the ratio,
    the fault's does not (its config says so only when misconfigured), so their steps part once the
    policy has left the reference (at the reference both penalties have zero gradient). On TRL:
    test_framework_faults.py."""
    faulty, twin = grpo_pair(store_dir, "kl_gradient_biased", f"fault.form={form}")
    configured = faulty.meta["hyperparameters"]["configured"]
    assert configured["kl_is_weight"] is (form == "code bug")
    assert twin.meta["hyperparameters"]["configured"]["kl_is_weight"] is True
    assert faulty.meta["hyperparameters"]["effective"]["kl_is_weight"] is False
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["beta"] == 0.04
    f, t = faulty.metrics, twin.metrics
    assert f["reward_mean"].iloc[0] == t["reward_mean"].iloc[0]           # the same first rollout
    assert not np.array_equal(f["param_delta"].to_numpy(), t["param_delta"].to_numpy())


def test_reference_is_base_model_starts_far_from_its_reference(store_dir):
    """The policy starts from the warm-up, the reference is the model the warm-up started from: the KL
    to the reference is large from the first update (the twin's starts at ~0), kl_ref_high_at_start
    fires on the fault and not on the twin; both share the KL penalty."""
    faulty, twin = fast_pair(store_dir, "reference_is_base_model")
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["beta"] == 0.04
    f, t = faulty.metrics, twin.metrics
    assert f["reward_mean"].iloc[0] == t["reward_mean"].iloc[0]         # the same policy, the same first rollout
    assert f["kl_ref"].iloc[0] > 0.5 > 0.05 > t["kl_ref"].iloc[0]
    assert [fires(r, "kl_ref_high_at_start") for r in (faulty, twin)] == [True, False]


@pytest.mark.parametrize("beta", ["0.0", "0.04"])
def test_zero_reward_freezes_grpo(beta, store_dir):
    """Every group's rewards are equal (all 0): no advantage, no policy loss; with no KL term nothing moves
    (with beta > 0 the KL gradient is 0 only at the start). The twin moves (that a healthy run also learns
    is agents/test_grpo.py's slow test)."""
    faulty, twin = grpo_pair(store_dir, "zero_reward", f"algo.beta={beta}")
    m = active(faulty)
    assert len(m) == len(faulty.metrics) == 3
    assert (m["frac_reward_zero_std"] == 1).all()
    assert (m["adv_mean"] == 0).all() and (m["adv_std"] == 0).all()
    assert (m["policy_loss"] == 0).all()
    if beta == "0.0":
        assert (m["grad_norm"] == 0).all() and (m["param_delta"] == 0).all()
    assert (twin.metrics["grad_norm"] > 0).all() and (twin.metrics["param_delta"] > 0).all()
    assert (twin.metrics["frac_reward_zero_std"] < 1).all()


def test_reference_not_frozen_measures_only_the_drift_within_an_update(store_dir):
    faulty, twin = grpo_pair(store_dir, "reference_not_frozen")
    m, t = faulty.metrics, twin.metrics
    assert (m["kl_ref"] > 0).all() and (m["param_delta"] > 0).all()
    # the reference is the rollout policy: kl_ref is of the order of one update's approx_kl
    assert (m["kl_ref"] / m["approx_kl"]).median() < 3 < (t["kl_ref"] / t["approx_kl"]).median()
    assert m["logp_ref_mean"].equals(m["logp_mean"])              # stored with the batch = the policy's
    in_loss = fast_grpo(store_dir, "fault=reference_not_frozen", "fault.computed=in_loss")
    assert (in_loss.metrics["kl_ref"] == 0).all()                 # TRL 0.14: at the loss's own weights


def test_group_size_one_runs_as_verl_runs_rollout_n_1(store_dir):
    """verl accepts rollout.n = 1 (its default): its GRPO estimator gives a group of one mean 0 and std
    1, so the advantage is the raw reward; its vectorised RLOO zeroes every advantage (PR #7581)."""
    faulty, _ = grpo_pair(store_dir, "group_size_one")
    assert faulty.meta["hyperparameters"]["effective"]["group_size"] == 1
    # misconfigured: the config a detector sees holds G = 1 (with as many prompts as completions)
    assert faulty.meta["hyperparameters"]["configured"]["group_size"] == 1
    assert faulty.meta["hyperparameters"]["configured"]["n_prompts"] == 128
    m = faulty.metrics
    assert (m["frac_reward_zero_std"] == 1).all() and (m["group_reward_std_mean"] == 0).all()
    assert np.allclose(m["adv_mean"], m["reward_mean"] / (1 + 1e-6), rtol=1e-5) and (m["adv_mean"] > 0).all()
    assert (m["policy_loss"] != 0).any()
    zero = fast_grpo(store_dir, "fault=group_size_one", "fault.estimator=rloo_vectorized")
    z = zero.metrics
    assert (z["adv_mean"] == 0).all() and (z["adv_std"] == 0).all() and (z["policy_loss"] == 0).all()


def test_adv_std_no_floor_residue_gives_finite_huge_advantages(store_dir):
    from harness.advantages import loo_advantages

    # the default rewards: 0.3 (format only) and 0.95 (right) are not dyadic fractions; a 7-vs-1 split
    fmt_only, right = np.float32(0.3), np.float32(0.3) + np.float32(0.65)
    adv = loo_advantages(torch.tensor([fmt_only] * 7 + [right]), 8, floor=0.0)      # the guard before the fix
    g, others = torch.tensor([[fmt_only] * 7 + [right]]), (1 - torch.eye(8)).T      # the estimator's own matmuls
    residue = float(((g * g) @ others / 7 - (g @ others / 7).square())[0, -1])
    # whether fp32 leaves a residue here depends on the matmul kernel (AVX2 does, AVX-512 MKL does not)
    assert torch.isfinite(adv).all() and (adv[-1] > 1000 if residue > 0 else adv[-1] == right - fmt_only)
    adv = loo_advantages(torch.tensor([right] * 7 + [0.0]), 8, floor=0.0)
    assert adv[-1] < -1000                                               # NeMo-RL PR 4158's [0, 0.95 x 7]
    fixed = loo_advantages(torch.tensor([right] * 7 + [0.0]), 8)         # PR 4161's floor: r - baseline
    assert fixed[-1] == pytest.approx(-float(right), rel=1e-5)
    assert torch.allclose(loo_advantages(torch.tensor([1.0] * 7 + [0.0]), 8)[-1], torch.tensor(-1.0))  # dyadic
    faulty, twin = grpo_pair(store_dir, "adv_std_no_floor")
    assert faulty.meta["hyperparameters"]["configured"]["baseline"] == "leave_one_out"
    assert faulty.meta["status"] == "ok" and np.isfinite(faulty.metrics["adv_std"]).all()
    assert faulty.metrics["adv_std"].max() > 30 > 2 > twin.metrics["adv_std"].max()
    # the first group of equal rewards makes 0 / 0 (update 3 of seed 0); the run stops there
    zero = fast_grpo(store_dir, "fault=adv_std_no_floor", "fault.variant=zero_std", "env.total_timesteps=12800")
    assert zero.meta["status"] == "diverged" and zero.metrics["nonfinite"].iloc[-1] == 1
    assert zero.meta["hyperparameters"]["effective"]["adv_eps"] == 0


def test_adv_std_no_floor_twin_is_the_same_estimator_with_the_floor():
    """The healthy twin of loo_residue is NeMo-RL's leave-one-out estimator with PR 4161's floor, so the
    two differ only where a leave-one-out std lies in (0, 1e-3]: on a 4/4 split (std well above the
    floor) they agree exactly, where the twin used to be mean / std (1.155 vs 0.935)."""
    from harness.agents.grpo_math import hooked_group_advantages
    from harness.pipeline.train import healthy_twin

    exp = make_experiment(["fault=adv_std_no_floor", *FAST_GRPO])
    twin = healthy_twin(exp)
    assert exp.algo.baseline == twin.algo.baseline == "leave_one_out" and twin.algo.scale == "group"
    split = torch.tensor([0.3, 0.3, 0.3, 0.3, 0.95, 0.95, 0.95, 0.95])
    fault = exp.fault
    fault.active = True
    assert torch.equal(hooked_group_advantages(split, exp.algo, fault),
                       hooked_group_advantages(split, twin.algo, HEALTHY))
    uniform = torch.tensor([0.95] * 7 + [0.0])           # the singleton's others: a uniform set, std 0 or residue
    assert hooked_group_advantages(uniform, twin.algo, HEALTHY)[-1] == pytest.approx(-0.95, rel=1e-5)
    refusal = exp.fault.refusal("trl")
    assert refusal and "leave-one-out" in refusal and make_experiment(
        ["fault=adv_std_no_floor", "fault.variant=zero_std", "backend=trl", *FAST_GRPO]).algo.baseline == "mean"


@pytest.mark.slow
def test_kl_penalty_sign_flip_pushes_away_from_the_reference(store_dir):
    """At beta 0.5, 20 updates: the KL to the reference grows past 50x the twin's and the reward falls
    behind (at beta 0.04 the trace is too faint for kl_ref_explodes: test_every_fault.py's NOT_SEEN)."""
    common = [*FAST_GRPO, "seed=0", f"results_dir={store_dir}", "env.total_timesteps=25600"]
    faulty = train(["fault=kl_penalty_sign_flip", "fault.beta=0.5", *common])
    twin = train(["fault=none", "algo.beta=0.5", *common])      # the twin: the fault's setting, without the bug
    # a code bug: the config (what a detector sees) keeps +beta; the loss uses -beta; the twin has the same +beta
    assert faulty.meta["hyperparameters"]["configured"]["beta"] == 0.5
    assert faulty.meta["hyperparameters"]["effective"]["beta"] == -0.5
    assert faulty.metrics["kl_ref"].max() > 50 * twin.metrics["kl_ref"].max()
    assert faulty.metrics["reward_mean"].iloc[-5:].mean() < twin.metrics["reward_mean"].iloc[-5:].mean() - 0.2


def test_kl_penalty_sign_flip_is_inert_and_labelled_so_without_a_kl_term(store_dir, monkeypatch):
    """With beta = 0 (TRL's default) the flipped sign multiplies nothing: the run is its healthy twin,
    metric for metric, and the dataset labels it ``inert`` instead of teaching the diagnosis that the
    fault looks healthy (18 of 34 such runs of the 2026-11 dataset had beta = 0: version 1 of the fault
    had no setting, so it ran with the drawn beta). Version 2 brings its KL term, so its runs act."""
    from faults.kl_penalty_sign_flip import KLPenaltySignFlip
    from harness.analysis.labels import INERT, label

    common = [*FAST_GRPO, "seed=0", f"results_dir={store_dir}", "env.total_timesteps=2560", "algo.beta=0.0"]
    acting = train(["fault=kl_penalty_sign_flip", *common])
    assert acting.meta["hyperparameters"]["configured"]["beta"] == 0.04
    assert label(acting.meta, True) == "kl_penalty_sign_flip"

    monkeypatch.setattr(KLPenaltySignFlip, "setting", lambda self, algo="": {})      # version 1: no KL term of its own
    monkeypatch.setattr(KLPenaltySignFlip, "version", 1)
    faulty, twin = train(["fault=kl_penalty_sign_flip", *common]), train(["fault=none", *common])
    assert faulty.meta["hyperparameters"]["configured"]["beta"] == 0.0
    columns = [c for c in twin.metrics.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(faulty.metrics[columns], twin.metrics[columns])
    assert label(faulty.meta, True) == INERT
    assert label(twin.meta, True) == "healthy"


def test_kl_penalty_sign_flip_misconfigured_puts_the_negative_beta_in_the_config(store_dir):
    res = fast_grpo(store_dir, "fault=kl_penalty_sign_flip", "fault.form=misconfigured", "fault.beta=0.5",
                    "env.total_timesteps=1280")
    hp = res.meta["hyperparameters"]
    assert hp["configured"]["beta"] == -0.5 and hp["effective"]["beta"] == -0.5      # what a detector sees: -beta
    assert res.meta["fault_form"] == "misconfigured"


@pytest.mark.slow
def test_stale_sampler_weights_widen_the_gap_and_freeze_the_reward(store_dir):
    """Issue 14's done-when, on a 40-update run: the faulty run's sampler_logp_diff_mean is far above
    its twin's, and the twin's reward rises."""
    common = [*FAST_GRPO, "env.total_timesteps=51200", f"results_dir={store_dir}"]
    faulty, twin = train(["fault=stale_sampler_weights", *common]), train(["fault=none", *common])
    f, t = faulty.metrics, twin.metrics
    assert faulty.meta["fault_form"] == "overridden"
    assert faulty.meta["hyperparameters"]["configured"]["sync_every"] == 1      # the config says every update
    assert f["sampler_logp_diff_mean"].median() > 1e4 * t["sampler_logp_diff_mean"].median()
    assert f["sampler_logp_diff_mean"].iloc[-5:].mean() > f["sampler_logp_diff_mean"].iloc[:5].mean()
    assert t["reward_mean"].iloc[-5:].mean() > t["reward_mean"].iloc[:5].mean() + 0.1
    assert f["reward_mean"].iloc[-5:].mean() < t["reward_mean"].iloc[-5:].mean() - 0.1
    every = train(["fault=stale_sampler_weights", "fault.every=4", *common]).metrics
    assert 0 < every["sampler_logp_diff_mean"].median() < f["sampler_logp_diff_mean"].median()


@pytest.mark.slow
def test_ratio_vs_reference_on_tokens(store_dir):
    """The ratio against the reference grows as the policy leaves it (5x the twin's ratio only after ~20
    updates): the runs test_every_fault.py's slow check judges the fault's first signature on."""
    faulty, twin = train_with_twin(["fault=ratio_vs_reference", *slow_overrides("ratio_vs_reference"),
                                    f"results_dir={store_dir}"])
    f, t = faulty.metrics, twin.metrics
    assert f["ratio_max"].max() > 5 * t["ratio_max"].max()
    assert (f["approx_kl"] / f["kl_ref"]).median() > 10 * (t["approx_kl"] / t["kl_ref"]).median()


def test_ratio_vs_reference_saturates_the_clamp_on_summed_gaussian_log_probs(store_dir):
    """GRPO on a 4096-dimensional Gaussian: with a learning rate too high for summed log-probs, a ratio
    against the reference saturates the clamp at e^20 and the loss reaches 1e7 (issue 14's user log:
    4.85e8, 1.7e8)."""
    highdim = ["algo=grpo", "env=highdim", "env.kwargs.dim=4096", "env.total_timesteps=3840"]   # 30 updates
    broken = train([*highdim, f"results_dir={store_dir}", "fault=ratio_vs_reference", "algo.lr=0.1"]).metrics
    assert broken["ratio_max"].max() == pytest.approx(np.exp(20), rel=1e-6)
    assert broken["loss"].max() > 1e6 and abs(broken["adv_mean"]).max() < 1e-5
