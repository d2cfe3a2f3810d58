"""GRPO faults on the token task's sampler/trainer path: untempered trainer log-probs, dropout left
on in the old/reference passes, EOS dropped from (or padding kept in) the completion mask, and
gradient accumulation that keeps only the last micro-batch. Each test trains a short real run and
its healthy twin (which shares the fault's setting) and checks the mechanism in what was logged."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from faults import FAULTS
from harness.agents.core import MinibatchEval, ppo_update
from harness.analysis.signatures import evaluate
from harness.hooks import HEALTHY
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import RunResult, get_or_train
from harness.store import RunStore
from tests.helpers import train_with_twin

GRPO = ["algo=grpo", "env=toyseq", "env.total_timesteps=12800"]          # 10 updates of 128 completions
B = 16 * 8                                                                # n_prompts x group_size


def fault_and_twin(store_dir, fault: str, *overrides: str) -> tuple[RunResult, RunResult]:
    return train_with_twin([*GRPO, f"fault={fault}", f"results_dir={store_dir}", *overrides])


def signature_fires(run: RunResult, name: str) -> bool:
    return evaluate(run.metrics, run.meta, names=[name])[name].fired


def first_epoch_tokens(store_dir, run: RunResult) -> np.ndarray:
    """Tokens in the trainer's mask per update (the minibatches of the first epoch cover the batch once)."""
    steps = RunStore(store_dir).load_steps(run.run_id)
    return steps[steps["epoch"] == 0].groupby("update")["n_tokens"].sum().to_numpy()


def test_untempered_logprobs_trainer_disagrees_with_the_sampler(store_dir):
    fault, twin = fault_and_twin(store_dir, "untempered_logprobs")
    for run in (fault, twin):                              # the setting: both sample at T = 0.7
        assert run.meta["hyperparameters"]["configured"]["temperature"] == 0.7
    f, t = fault.metrics, twin.metrics
    assert (t["sampler_logp_diff_mean"] < 1e-4).all()      # fp32 sampler and trainer agree at the same T
    assert (f["sampler_logp_diff_mean"] > 0.05).all() and (f["kl_sampler"] > 0.01).all()
    # the trainer's log-probs are those of the flatter T = 1 distribution: lower on the sampled tokens
    assert f["logp_mean"].iloc[0] < t["logp_mean"].iloc[0]
    with pytest.raises(Exception, match="temperature=1.0"):
        FAULTS["untempered_logprobs"](temperature=1.0)
    for name in FAULTS["untempered_logprobs"].expected:
        assert signature_fires(fault, name) and not signature_fires(twin, name), name


def test_dropout_in_logprob_makes_old_logprobs_noisy(store_dir):
    fault, twin = fault_and_twin(store_dir, "dropout_in_logprob")
    for run in (fault, twin):                              # the setting: both models have dropout 0.1
        assert run.meta["hyperparameters"]["configured"]["dropout"] == 0.1
    f, t = fault.metrics, twin.metrics
    # the sampler generates in eval mode; the twin's old pass agrees with it, the fault's does not
    assert (t["sampler_logp_diff_mean"] < 1e-4).all() and (f["sampler_logp_diff_mean"] > 0.01).all()
    # two dropout masks (old and new pass) instead of one: the ratio is further from 1 from the first minibatch
    steps_f, steps_t = (RunStore(store_dir).load_steps(r.run_id) for r in (fault, twin))
    first = (steps_f["update"] == 0) & (steps_f["epoch"] == 0)
    assert steps_f[first]["approx_kl"].mean() > 1.5 * steps_t[first]["approx_kl"].mean()
    assert f["approx_kl"].median() > t["approx_kl"].median()
    assert signature_fires(fault, "kl_sampler_high") and not signature_fires(twin, "kl_sampler_high")
    # only the reference pass: the old log-probs agree with the sampler again
    ref_only = get_or_train(make_experiment([*GRPO, "fault=dropout_in_logprob", "fault.passes=ref",
                                             "env.total_timesteps=2560", f"results_dir={store_dir}"]))
    assert (ref_only.metrics["sampler_logp_diff_mean"] < 1e-4).all()


def test_eos_masked_drops_exactly_the_eos_tokens(store_dir):
    fault, twin = fault_and_twin(store_dir, "eos_masked")
    for run in (fault, twin):
        m = run.metrics
        generated = m["length_mean"].to_numpy() * B
        ended = (1 - m["response_clip_ratio"].to_numpy()) * B          # completions that emitted EOS
        trained = first_epoch_tokens(store_dir, run)
        expected = generated - ended if run is fault else generated
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

    fault, twin = fault_and_twin(store_dir, "post_eos_unmasked")
    for run in (fault, twin):                                             # the setting: both stop at </a> too
        assert run.meta["hyperparameters"]["configured"]["stop_at_close"] is True
    generated = fault.metrics["length_mean"].to_numpy() * B
    trained = first_epoch_tokens(store_dir, fault)
    assert (trained > generated + 0.5).all()                             # padding joined the mask
    assert first_epoch_tokens(store_dir, twin) == pytest.approx(twin.metrics["length_mean"].to_numpy() * B, abs=0.5)
    # well-formed completions now end at </a> and are rewarded as such: the twin still learns the format
    assert twin.metrics["reward_mean"].iloc[0] > 0.3
    # the summed completion log-prob now includes padding the warm-up never produced
    assert fault.metrics["logp_mean"].iloc[0] < twin.metrics["logp_mean"].iloc[0] - 5
    assert signature_fires(fault, "logp_per_token_low") and not signature_fires(twin, "logp_per_token_low")
    # generation is untouched: the first rollout is the twin's
    assert fault.metrics["length_mean"].iloc[0] == twin.metrics["length_mean"].iloc[0]
    assert fault.metrics["reward_mean"].iloc[0] == twin.metrics["reward_mean"].iloc[0]


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
    run, twin = fault_and_twin(store_dir, "grad_accum_microbatch_dropped", "env.total_timesteps=3840")
    for r in (run, twin):
        assert r.meta["hyperparameters"]["configured"]["grad_accum"] == 4
    assert run.metrics["grad_norm"].median() < 0.7 * twin.metrics["grad_norm"].median()
