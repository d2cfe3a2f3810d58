"""GRPO's LLM parts: the warm-up checkpoint cache, the sampler (precision, sampling filters, weight
sync and lag, KV cache), importance-sampling correction, gradient accumulation, the sampler
controls, and GRPO on the high-dimensional Gaussian generator (the sampler faults: tests/faults/)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from faults.base import Fault
from harness.agents import sft
from harness.agents.grpo_math import importance_weights
from harness.agents.lm import build_model, completion_logits, token_logprobs
from harness.agents.sampler import Sampler, filter_logits
from harness.analysis import signatures
from harness.hooks import HEALTHY
from harness.store import metrics_frame
from tests.helpers import make_experiment, train

GRPO = ["algo=grpo", "env=toyseq"]
SHORT = ["env.total_timesteps=25600"]                 # 20 updates
LEARN = ["env.total_timesteps=51200"]                 # 40 updates: enough for a healthy reward to rise on any CPU family
HIGHDIM = ["algo=grpo", "env=highdim", "env.kwargs.dim=4096", "env.total_timesteps=3840"]   # 30 updates


def policy_and_prompts(store_dir, n: int = 32, *overrides: str):
    exp = make_experiment([*GRPO, f"results_dir={store_dir}", *overrides])
    env = sft.task_env(exp, n)
    state, _ = sft.load_checkpoint(exp)
    model = build_model(exp.algo, env.vocab.size, env.prompt_width, env.max_len, env.vocab)
    model.load_state_dict(state)
    env.reset(seed=0)
    prompts = torch.tensor(env.prompts)
    return exp, env, model, prompts


def test_warm_up_checkpoint_is_cached_deterministic_and_redone_when_corrupt(tmp_path):
    store_dir = tmp_path / "a"
    exp = make_experiment([*GRPO, f"results_dir={store_dir}", "algo.sft_steps=30"])
    state, meta = sft.load_checkpoint(exp)
    path = sft.checkpoint_dir(exp)
    assert path.parent.name == "checkpoints" and sft.problem(path) is None
    assert meta["loss_last"] < meta["loss_first"] and meta["spec"]["vocab_size"] == 15
    mtime = (path / "model.pt").stat().st_mtime_ns
    # any seed, fault or trainer setting shares it; the model or the warm-up settings do not
    same = [*GRPO, f"results_dir={store_dir}", "algo.sft_steps=30"]
    for other in (["seed=3", "fault=zero_reward", "algo.lr=1e-3", "algo.temperature=0.7"],):
        assert sft.checkpoint_dir(make_experiment([*same, *other])) == path
    assert sft.checkpoint_dir(make_experiment([*same, "model.d_model=128"])) != path
    assert sft.checkpoint_dir(make_experiment([*same, "algo.sft_seed=1"])) != path
    sft.load_checkpoint(exp)
    assert (path / "model.pt").stat().st_mtime_ns == mtime                 # reused, not retrained
    # the same config elsewhere gives the same weights
    again, _ = sft.load_checkpoint(dataclasses.replace(exp, results_dir=str(tmp_path / "b")))
    assert all(torch.equal(state[k], again[k]) for k in state)
    # a truncated file makes the checkpoint corrupt: it is trained again, to the same weights
    data = (path / "model.pt").read_bytes()
    (path / "model.pt").write_bytes(data[: len(data) // 2])
    assert "does not match" in sft.problem(path)
    redone, _ = sft.load_checkpoint(exp)
    assert sft.problem(path) is None and all(torch.equal(state[k], redone[k]) for k in state)
    assert json.loads((path / "meta.json").read_text())["files"]["model.pt"]["bytes"] == len(data)


def test_sampler_log_probs_match_the_trainer_in_fp32_not_in_bf16(store_dir):
    exp, env, model, prompts = policy_and_prompts(store_dir)
    v = env.vocab
    for precision, low, high in (("fp32", 0.0, 1e-5), ("bf16", 1e-3, 1.0)):
        sampler = Sampler(model, precision)
        torch.manual_seed(0)
        gen = sampler.generate(prompts, prompts != v.pad, 10, v.eos, v.pad, 1.0, 0, 1.0, HEALTHY)
        assert gen.mask.sum(1).equal(gen.lengths) and (gen.tokens[~gen.mask] == v.pad).all()
        ended = gen.tokens[gen.ended, :].eq(v.eos).sum(1)
        assert (ended == 1).all()                                          # one EOS, then padding
        with torch.no_grad():
            trainer, _ = token_logprobs(completion_logits(model, prompts, prompts != v.pad, gen.tokens, gen.mask),
                                        gen.tokens)
        gap = (trainer - gen.logp)[gen.mask].abs().mean()
        assert low <= gap < high, (precision, gap)


def test_temperature_and_top_p_are_what_the_sampler_records():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    kept = filter_logits(logits, top_k=0, top_p=0.7)
    assert torch.isinf(kept).tolist() == [[False, True, True, True]] or torch.isinf(kept).sum() == 2
    probs = logits.softmax(-1)[0]
    assert torch.isinf(filter_logits(logits, 0, float(probs[0] + probs[1]) - 1e-4))[0].tolist() == \
        [False, False, True, True]
    assert torch.isinf(filter_logits(logits, 3, 1.0))[0].tolist() == [False, False, False, True]
    assert not torch.isinf(filter_logits(logits, 0, 1.0)).any()


def test_sampler_sync_every_k_and_lag_queue(store_dir):
    _, env, model, prompts = policy_and_prompts(store_dir)
    sampler = Sampler(model, lag=2)
    weights = next(iter(model.parameters()))
    seen = []
    for update in range(5):
        with torch.no_grad():
            weights.add_(1.0)                            # a stand-in for an optimizer step
        sampler.push(model, update)
        sampler.sync()
        seen.append(sampler.version)
    assert seen == [0, 0, 0, 1, 2]                       # two versions behind once the queue is full
    assert torch.allclose(next(iter(sampler.model.parameters())), weights - 2)


def test_importance_weights_truncate_and_mask():
    trainer = torch.log(torch.tensor([[0.5, 0.9], [0.9, 0.9]]))
    sampler = torch.log(torch.tensor([[0.1, 0.9], [0.9, 0.45]]))
    mask = torch.ones(2, 2, dtype=torch.bool)
    tis = importance_weights(trainer, sampler, mask, "token_truncate", 0.0, 3.0)
    assert torch.allclose(tis, torch.tensor([[3.0, 1.0], [1.0, 2.0]]))
    mis = importance_weights(trainer, sampler, mask, "token_mask", 0.0, 3.0)
    assert torch.allclose(mis, torch.tensor([[0.0, 1.0], [1.0, 2.0]]))
    seq = importance_weights(trainer, sampler, mask, "sequence_mask", 0.0, 3.0)
    assert torch.allclose(seq, torch.tensor([[0.0, 0.0], [2.0, 2.0]]))


@dataclasses.dataclass
class FirstMicrobatchOnly(Fault):
    """Only micro-batch 0's gradient reaches the optimizer (DeepSpeed PR 7967's regression)."""

    name = "test_first_microbatch_only"
    algos = ("grpo",)

    def microbatch_backward(self, index: int, n_micro: int) -> bool:
        return index == 0


def test_gradient_accumulation_is_the_same_update_and_a_fault_can_drop_a_microbatch(store_dir):
    from harness.pipeline.train import get_or_train
    from harness.store import RunStore

    short = [*GRPO, f"results_dir={store_dir}", "env.total_timesteps=3840"]          # 3 updates
    store = RunStore(store_dir)
    one = store.load_steps(train(short).run_id).iloc[0]                          # the first minibatch
    four_run = train([*short, "algo.grad_accum=4"])
    four = store.load_steps(four_run.run_id).iloc[0]
    assert (four_run.metrics["optimizer_steps"] == 4).all()
    for col in ("policy_loss", "grad_norm", "kl_ref", "entropy", "n_tokens"):
        assert four[col] == pytest.approx(one[col], rel=1e-4, abs=1e-7), col
    exp = make_experiment([*short, "algo.grad_accum=4"])
    dropped = get_or_train(dataclasses.replace(exp, fault=FirstMicrobatchOnly(),
                                               fault_cfg={"_target_": "tests.agents.test_grpo_llm.FirstMicrobatchOnly"}))
    d = store.load_steps(dropped.run_id).iloc[0]
    assert d["policy_loss"] == pytest.approx(one["policy_loss"], rel=1e-4)   # the loss is the whole minibatch's
    assert d["grad_norm"] < 0.6 * one["grad_norm"]                           # the gradient about a quarter's


CONTROLS = [("async_tis", "sampler_mismatch_high"), ("bf16_tis", None), ("temperature", None)]


@pytest.mark.slow
@pytest.mark.parametrize("variant, fires", CONTROLS)
def test_sampler_look_alike_controls_are_healthy(variant, fires, store_dir):
    # the temperature control's reward rises slowly (+0.046 over 20 updates on an AVX-512 machine): 40
    # updates; the sampler controls keep 20 (async_tis's raw mismatch is what a 20-update log shows)
    res = train([f"algo=grpo_{variant}", "env=toyseq", *(LEARN if variant == "temperature" else SHORT),
                 f"results_dir={store_dir}"])
    m = res.metrics
    assert res.meta["is_control"] and res.meta["algo_variant"] == variant and res.meta["status"] == "ok"
    assert m["reward_mean"].iloc[-5:].mean() > m["reward_mean"].iloc[:5].mean() + 0.05
    if fires:        # a raw symptom of a sampler fault, with nothing wrong
        assert signatures.evaluate(m, res.meta, names=[fires])[fires].fired


def test_highdim_grpo_is_healthy(store_dir):
    """(ratio_vs_reference there: tests/faults/test_grpo_faults.py)"""
    healthy = train([*HIGHDIM, f"results_dir={store_dir}"])
    h = healthy.metrics
    assert healthy.meta["status"] == "ok" and healthy.meta["action_space"] == {"type": "box", "dim": 4096}
    assert h["ratio_max"].max() < 1.5 and h["kl_ref"].max() < 0.05 and 0.3 < h["reward_mean"].mean() < 0.7
    assert (h["logp_mean"] < -2000).all()                       # summed over 4096 dimensions


def test_reward_function_columns_are_kept_in_the_store():
    rows = [{"update": 0, "env_step": 1, "fault_active": False, "reward_mean": 0.5, "reward/format": 1.0,
             "reward/correct": 0.25}]
    df = metrics_frame(rows)
    assert list(df.columns[-2:]) == ["reward/correct", "reward/format"] and df["reward/format"].iloc[0] == 1.0


def test_text_task_helpers_agree_with_the_env(store_dir):
    exp = make_experiment([*GRPO, f"results_dir={store_dir}"])
    env = sft.task_env(exp)
    rows = env.prompt_texts(4, np.random.default_rng(0))
    v = env.vocab
    ids = [[v.open, *(d + v.first_digit for d in r["answer"]), v.close, v.eos, v.pad] for r in rows]
    got = env.score_completion_ids(ids, [r["answer"] for r in rows])
    assert got["format"] == [1.0] * 4 and got["correct"] == [1.0] * 4
    unended = env.score_completion_ids([i[:-2] for i in ids], [r["answer"] for r in rows])  # cut before EOS
    assert unended["format"] == [0.0] * 4 and unended["correct"] == [1.0] * 4
    cut = env.score_completion_ids([i[:-3] for i in ids], [r["answer"] for r in rows])      # no </a>, no EOS
    assert cut["format"] == [0.0] * 4 and cut["correct"] == [0.0] * 4
    assert rows[0]["prompt"].startswith("<s> ")


@pytest.mark.parametrize("options", [
    ["algo.kl_estimator=k1"], ["algo.kl_estimator=k2", "algo.kl_is_weight=false"], ["algo.top_p=0.8", "algo.top_k=5"],
    ["algo.sampler_precision=fp16"], ["algo.use_sampler_logprobs=true", "algo.is_correction=sequence_mask"],
    ["algo.sync_every=2", "algo.sampler_lag=1", "algo.is_correction=token_mask"],
    ["model.dropout=0.1", "model.tie_embeddings=true", "model.n_layers=3", "algo.sft_steps=20"],
])
def test_generation_and_trainer_options_run_and_are_recorded(options, store_dir):
    res = train([*GRPO, "env.total_timesteps=2560", f"results_dir={store_dir}", *options])       # 2 updates
    assert res.meta["status"] == "ok", res.meta["error"]
    configured = res.meta["hyperparameters"]["configured"]
    for option in options:
        key, value = option.split("=")
        assert str(configured[key.split(".")[1]]).lower() == value.lower()
    assert res.metrics["sampler_logp_diff_mean"].notna().all() and res.meta["start_checkpoint"]["files"]
    if "algo.top_p=0.8" in options:        # the trainer replays the sampler's truncation: one distribution
        assert res.metrics["sampler_logp_diff_mean"].max() < 1e-4        # (sampling_filter_not_replayed: > 0.01)


def test_highdim_refuses_a_fault_its_loop_never_reaches_and_reaches_what_it_declares(store_dir):
    """env=highdim has no tokens: a fault on completion masks (eos_masked) would run silently unapplied,
    so it is refused in one line; and the hooks the loop declares it reaches are the ones a run calls."""
    from harness.agents import grpo_gaussian
    from harness.config import ConfigError
    from harness.hooks import HOOK_SITES, Hooks

    with pytest.raises(ConfigError, match="fault eos_masked acts on completion_mask, which env=highdim never reaches"):
        make_experiment([*HIGHDIM, f"results_dir={store_dir}", "fault=eos_masked"])
    called: set[str] = set()

    def recorder(name):
        def method(self, *args, **kwargs):
            called.add(name)
            return getattr(Hooks, name)(self, *args, **kwargs)
        return method

    recording = dataclasses.dataclass(type("Recording", (Fault,), {"name": "recording",
                                                                   **{h: recorder(h) for h in HOOK_SITES}}))
    exp = make_experiment(["algo=grpo", "env=highdim", "env.kwargs.dim=64", "env.total_timesteps=512",
                           f"results_dir={store_dir}"])
    rows = list(grpo_gaussian.train(dataclasses.replace(exp, fault=recording())))
    assert len(rows) == 4 and called == grpo_gaussian.REACHED
