"""Real TRL PPOTrainer logs, healthy and with bugs introduced the way TRL users introduce them.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 /work/trl-ppo-venv/bin/python benchmarks/realworld/trl_ppo_runs.py \\
        [--jobs 1] [--out results/realworld/trl_ppo] [--list]

**A test set.** These logs measure how ``python -m harness.diagnose`` does on logs it never saw,
written by a real framework. Nobody may tune the diagnosis' thresholds, features or model to them;
other real logs nobody here produced will judge the result too. This script is an independent
implementation: it imports nothing of the harness (not ``harness``, not ``faults``); from
``trl_runs.py`` it takes the task and the warm-started model (plain functions, no TRL in them).

Needs its own interpreter: TRL's RLHF ``PPOTrainer`` (policy, value model, reward model, frozen
reference) is gone from the TRL the rest of this repository uses (1.16). Measured with **trl 0.28.0**,
the newest release where ``from trl import PPOTrainer, PPOConfig`` still works (0.26-0.28 re-export
``trl.experimental.ppo``'s trainer under that name with a FutureWarning; 0.29 keeps it only in
``trl.experimental``, later 1.x releases drop it), with transformers 5.2.0 (the 5.x of that
release's time), accelerate 1.16.0, datasets 5.2.0, tokenizers 0.22.2, tensorboard 2.21.0,
torch 2.13.0 CPU, Python 3.11.7, in a throwaway venv::

    python3 -m venv /work/trl-ppo-venv
    /work/trl-ppo-venv/bin/pip install torch==2.13.0            # first: the CPU build
    /work/trl-ppo-venv/bin/pip install trl==0.28.0 transformers==5.2.0 accelerate datasets tokenizers \\
        tensorboard torch==2.13.0

What runs, as a TRL user would, with no Hugging Face Hub (``HF_HUB_OFFLINE=1``):
1. trl_runs.py's task, ``sort : 3 9 1 4 1`` -> ``1 1 3 4 9``, and its base model: the word-level
   tokenizer and the 2-layer ``LlamaForCausalLM`` built from a config and warmed up by its short SFT
   loop, once, into ``<out>/base-model/`` (shared by every run);
2. the four models ``PPOTrainer`` takes: the policy (``AutoModelForCausalLM.from_pretrained`` of the
   SFT checkpoint), the reference (a second load of it), the value model
   (``AutoModelForSequenceClassification.from_pretrained(<SFT checkpoint>, num_labels=1)``: the trunk
   is the SFT model's, the ``score`` head fresh; TRL's example loads it from the reward model's
   checkpoint, and this task's reward "model" has no weights to start from), and the reward model: a
   small ``nn.Module`` with what TRL's ``get_reward`` calls, ``base_model_prefix = "backbone"`` (a
   module that decodes the token ids with the tokenizer, splits prompt and completion - the prompt is
   always ``sort :`` and five digits - and scores the completion with trl_runs.py's ``correct``, the
   share of positions holding the right digit, returned as a one-channel "hidden state" at every
   position) and ``score`` (identity), so the trainer reads the score at the last token as it does
   for a sequence classifier;
3. TRL's ``PPOTrainer``, unmodified, with ``use_cpu=True``, ``bf16=False``, TRL's PPO defaults
   (4 PPO epochs, 1 minibatch, kl_coef 0.05 with the k1 estimator, cliprange 0.2, vf_coef 0.1,
   cliprange_value 0.2, gamma 1, lam 0.95, temperature 0.7, linear decay without warm-up) and, set
   explicitly (``CONFIG``): learning_rate ``LR``, 64 prompts per update
   (``per_device_train_batch_size``), ``total_episodes`` = 64 x ``UPDATES``, ``response_length`` 8,
   ``stop_token="eos"``, ``missing_eos_penalty=1.0`` (as TRL's PPO example),
   ``num_sample_generations=0`` (no sample tables printed), ``logging_steps=1``,
   ``report_to=["tensorboard"]``. PPOTrainer logs one row per update whatever ``logging_steps`` says,
   and saves like a Trainer: one checkpoint at the end (``save_steps`` = the number of updates)
   writes ``checkpoint-<updates>/trainer_state.json`` (the labelled log) and ``training_args.bin``
   beside the policy; the TensorBoard run is in ``runs/``.

How each bug is introduced (``VARIANTS``; the label's ``fault`` is the harness's name):
- ``PPOConfig`` values: ``learning_rate`` 100x; ``cliprange=1e-3``; ``kl_coef=-0.05`` (TRL accepts a
  negative coefficient: the KL penalty becomes a bonus; variant ``beta_neg``, the name of the same
  bug in trl_runs.py); ``vf_coef`` 100x (10);
- the reward model: its scorer compares the completion's digit strings with the target's int
  digits, so it returns 0 for every completion (minus TRL's missing-eos penalty, which stays);
- after construction: ``trainer.ref_model = trainer.policy_model`` (``PPOTrainer`` refuses
  ``ref_model=model``; assigned afterwards "to save memory", the reference moves with the policy);
- code, as a user who copies and edits the trainer: a ``PPOTrainer`` subclass whose ``train()`` is
  TRL's own source with exact text substitutions (``EDITS``; each anchor must occur exactly once in
  the installed source, else the run fails): the epoch loop run once (``range(args.num_ppo_epochs)``
  -> ``range(1)``, and the stats arrays sized to match, as verl's dp_actor lost its epoch loop; the
  config, ``training_args.bin`` and the TensorBoard ``args`` text still say 4), and the old log-probs
  replaced by the current policy's (``new_logprobs - mb_logprobs`` ->
  ``new_logprobs - new_logprobs.detach()``: the ratio is exactly 1). There is no smaller patch: both
  live inside ``train()``'s loop, on locals.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.realworld.common import DEFAULT_OUT, fault_of, locked, opaque_name, run_jobs, write_generation
from benchmarks.realworld.trl_runs import N_DIGITS, base_model, correct, make_dataset

TRL_MEASURED = "0.28.0"
UPDATES = 100           # PPO updates (rollouts of BATCH prompts) per run
BATCH = 64                # prompts per update (per_device_train_batch_size, one process)
LR = 3e-4                 # the healthy learning rate for this tiny model
# what every run sets (the rest is TRL's PPOConfig defaults)
CONFIG: dict[str, Any] = {
    "learning_rate": LR, "per_device_train_batch_size": BATCH, "total_episodes": BATCH * UPDATES,
    "response_length": N_DIGITS + 3, "stop_token": "eos", "missing_eos_penalty": 1.0}
HEALTHY_SEEDS = [0, 1, 2, 3, 4]
FAULT_SEEDS = [0, 1, 2]
# what a label records of the effective PPOConfig
RECORDED = ["learning_rate", "num_ppo_epochs", "num_mini_batches", "kl_coef", "kl_estimator", "cliprange", "vf_coef",
            "cliprange_value", "gamma", "lam", "whiten_rewards", "temperature", "response_length",
            "missing_eos_penalty", "stop_token", "total_episodes", "per_device_train_batch_size",
            "gradient_accumulation_steps", "lr_scheduler_type", "warmup_steps", "num_total_batches", "batch_size"]

# the exact substitutions in PPOTrainer.train's source (trl 0.28.0, trl/experimental/ppo/ppo_trainer.py)
EDITS: dict[str, list[tuple[str, str]]] = {
    "one_epoch": [
        ("stats_shape = (args.num_ppo_epochs, args.num_mini_batches, args.gradient_accumulation_steps)",
         "stats_shape = (1, args.num_mini_batches, args.gradient_accumulation_steps)"),
        ("for ppo_epoch_idx in range(args.num_ppo_epochs):", "for ppo_epoch_idx in range(1):")],
    "old_logp_recomputed": [
        ("logprobs_diff = new_logprobs - mb_logprobs", "logprobs_diff = new_logprobs - new_logprobs.detach()")],
}

# variant -> (how, spec). spec: "config" (PPOConfig values over CONFIG), "reward" ("buggy": the scorer
# returning 0), "ref_is_policy" (assigned after construction), "edits" (EDITS[variant] in train()).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "healthy": ("PPOTrainer at TRL's PPO defaults and CONFIG", {}),
    "lr_high": (f"PPOConfig(learning_rate={LR * 100:g}): 100x the healthy {LR:g}",
                {"config": {"learning_rate": LR * 100}}),
    "clip_tiny": ("PPOConfig(cliprange=1e-3)", {"config": {"cliprange": 1e-3}}),
    "reward_zero": ("the reward model's scorer compares the completion's digit strings with int digits: 0 for all",
                    {"reward": "buggy"}),
    "one_epoch": ("a PPOTrainer subclass whose train() (TRL's source) runs the PPO epoch loop once: "
                  "range(args.num_ppo_epochs) -> range(1); the config says num_ppo_epochs=4",
                  {"edits": "one_epoch"}),
    "ref_is_policy": ("trainer.ref_model = trainer.policy_model after construction (the reference moves with "
                      "the policy)", {"ref_is_policy": True}),
    "beta_neg": ("PPOConfig(kl_coef=-0.05): TRL accepts it; the KL penalty becomes a bonus",
                 {"config": {"kl_coef": -0.05}}),
    "old_logp_recomputed": ("a PPOTrainer subclass whose train() (TRL's source) takes the old log-probs from "
                            "the current policy in the minibatch loop: new_logprobs - new_logprobs.detach(), "
                            "ratio exactly 1", {"edits": "old_logp_recomputed"}),
    "vf_huge": ("PPOConfig(vf_coef=10): 100x TRL's default 0.1", {"config": {"vf_coef": 10.0}}),
}


def plan(healthy_seeds: list[int] = HEALTHY_SEEDS, fault_seeds: list[int] = FAULT_SEEDS,
         variants: list[str] | None = None, updates: int = UPDATES) -> list[dict[str, Any]]:
    jobs = []
    for variant, (how, spec) in VARIANTS.items():
        if variants is not None and variant not in variants:
            continue
        for seed in healthy_seeds if variant == "healthy" else fault_seeds:
            config = {**CONFIG, "total_episodes": BATCH * updates, **spec.get("config", {})}
            edits = EDITS.get(spec.get("edits", ""), [])
            jobs.append({"name": opaque_name("trl-ppo", variant, how, json.dumps(config, sort_keys=True),
                                             json.dumps(edits), seed, updates),
                         "env": f"sort{N_DIGITS}", "variant": variant, "how": how, "seed": seed, "config": config,
                         "reward": spec.get("reward", "correct"), "ref_is_policy": spec.get("ref_is_policy", False),
                         "edits": edits, "updates": updates, "setting": "script"})
    return jobs


# ---- the reward model -------------------------------------------------------------------------------
def scores_of(texts: list[str], buggy: bool = False) -> list[float]:
    """``sort : a b c d e <completion>`` (decoded, special tokens skipped) -> ``correct`` of the completion."""
    out = []
    for text in texts:
        words = text.split()
        prompt, completion = words[2:2 + N_DIGITS], words[2 + N_DIGITS:]
        target = " ".join(sorted(prompt, key=int))
        if buggy:           # the user's version: str digits against int digits, never equal
            out.append(sum(a == b for a, b in zip(completion, map(int, target.split()))) / N_DIGITS)
        else:
            out.append(correct([" ".join(completion)], [target])[0])
    return out


def reward_model(tokenizer: Any, buggy: bool = False) -> Any:
    """What ``get_reward`` calls: ``getattr(model, model.base_model_prefix)(input_ids=..., ...)`` then
    ``model.score(output.hidden_states[-1])``, read at the last non-pad token."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    class Scorer(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> BaseModelOutput:
            texts = tokenizer.batch_decode(input_ids, skip_special_tokens=True)
            s = torch.tensor(scores_of(texts, buggy), dtype=torch.float32, device=input_ids.device)
            return BaseModelOutput(hidden_states=(s[:, None, None].expand(-1, input_ids.shape[1], 1),))

    class SortRewardModel(torch.nn.Module):
        base_model_prefix = "backbone"

        def __init__(self) -> None:
            super().__init__()
            self.backbone = Scorer()
            self.score = torch.nn.Identity()

    return SortRewardModel()


# ---- the users' code changes ------------------------------------------------------------------------
def apply_edits(text: str, edits: list[tuple[str, str]], where: str = "PPOTrainer.train") -> str:
    for old, new in edits:
        n = text.count(old)
        if n != 1:
            raise ValueError(f"{where}: the edit's anchor {old!r} occurs {n} times (expected once): the installed "
                             f"TRL differs from the one these edits were written for ({TRL_MEASURED})")
        text = text.replace(old, new)
    return text


def make_trainer(edits: list[tuple[str, str]], **kwargs: Any) -> Any:
    """``PPOTrainer`` as imported by a user of trl 0.28 or, with edits, a subclass whose ``train`` is TRL's
    own source edited (compiled in the namespace of the module that defines it)."""
    import inspect
    import textwrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)       # "PPOTrainer is now located in trl.experimental"
        from trl import PPOTrainer
    trainer_cls = PPOTrainer
    if edits:
        original = PPOTrainer.train
        module = sys.modules[original.__module__]
        source = apply_edits(textwrap.dedent(inspect.getsource(original)), edits)
        namespace = dict(vars(module))
        exec(compile(source, f"<edited {module.__file__}>", "exec"), namespace)

        class EditedPPOTrainer(PPOTrainer):
            train = namespace["train"]

        trainer_cls = EditedPPOTrainer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)       # the same notice, from the constructor
        return trainer_cls(**kwargs)


def train(job: dict[str, Any], root: Path) -> dict[str, dict[str, Any]]:
    """One PPO run into ``root/<opaque name>/``; returns its label {log path: label}."""
    import trl
    from datasets import Dataset
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        PreTrainedTokenizerFast,
        PrinterCallback,
    )
    from transformers.utils import logging as hf_logging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        from trl import PPOConfig

    start = time.perf_counter()
    hf_logging.set_verbosity_error()        # "score.weight newly initialized" is expected (the value head)
    hf_logging.disable_progress_bar()
    model_dir = base_model(root)
    run_dir = root / job["name"]
    cfg = job["config"]
    updates = job["updates"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        args = PPOConfig(
            output_dir=str(run_dir), seed=job["seed"], use_cpu=True, bf16=False, gradient_checkpointing=False,
            logging_steps=1, report_to=["tensorboard"], save_strategy="steps", save_steps=updates,
            save_only_model=True, disable_tqdm=True, dataloader_num_workers=0, num_sample_generations=0, **cfg)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    rows = make_dataset()
    dataset = Dataset.from_list([{"input_ids": tokenizer(r["prompt"])["input_ids"]} for r in rows])
    policy = AutoModelForCausalLM.from_pretrained(model_dir)
    ref_policy = AutoModelForCausalLM.from_pretrained(model_dir)
    value_model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    trainer = make_trainer([tuple(e) for e in job["edits"]], args=args, processing_class=tokenizer, model=policy,
                           ref_model=ref_policy, reward_model=reward_model(tokenizer, job["reward"] == "buggy"),
                           value_model=value_model, train_dataset=dataset, eval_dataset=dataset.select(range(64)))
    if job["ref_is_policy"]:
        trainer.ref_model = trainer.policy_model     # "no need for a second copy"
    trainer.remove_callback(PrinterCallback)         # disable_tqdm prints every log line otherwise
    # PPOTrainer.train calls gc.collect() twice per update; over the objects the imports left (torch,
    # transformers) that is ~0.2 CPU-s each. Frozen, they are not scanned: no effect on the training.
    gc.freeze()
    trainer.train()
    gc.unfreeze()
    state = run_dir / f"checkpoint-{args.num_total_batches}" / "trainer_state.json"
    if not state.exists():
        raise RuntimeError(f"no {state} after training")
    tb = sorted(p.parent for p in (run_dir / "runs").rglob("events.out.tfevents*"))
    label = {"framework": "trl_ppo", "env": job["env"], "variant": job["variant"], "fault": fault_of(job["variant"]),
             "how": job["how"], "seed": job["seed"], "name": job["name"], "updates": updates, "setting": "script",
             "trl": trl.__version__,
             "hyperparameters": {k: getattr(getattr(args, k), "value", getattr(args, k)) for k in RECORDED},
             "config": cfg, "edits": [list(e) for e in job["edits"]], "reward": job["reward"],
             "ref_is_policy": job["ref_is_policy"],
             "tensorboard": str(tb[-1].relative_to(root)) if tb else None,
             "wall_s": round(time.perf_counter() - start, 2)}
    return {str(state.relative_to(root)): label}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "trl_ppo", help="where the logs and labels.json go")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (one torch thread each)")
    parser.add_argument("--variants", nargs="+", default=None, help=f"default: all of {', '.join(VARIANTS)}")
    parser.add_argument("--healthy-seeds", type=int, nargs="+", default=HEALTHY_SEEDS)
    parser.add_argument("--fault-seeds", type=int, nargs="+", default=FAULT_SEEDS)
    parser.add_argument("--updates", type=int, default=UPDATES, help="PPO updates per run")
    parser.add_argument("--list", action="store_true", help="print the plan and stop")
    args = parser.parse_args()
    jobs = plan(args.healthy_seeds, args.fault_seeds, args.variants, args.updates)
    if args.list:
        for j in jobs:
            extra = {k: v for k, v in j["config"].items() if CONFIG.get(k) != v and k != "total_episodes"}
            print(f"{j['name']}  seed {j['seed']}  {j['variant']:20s} {extra or ''} reward={j['reward']}"
                  f"{' ref_is_policy' if j['ref_is_policy'] else ''}{' edits=' + str(len(j['edits'])) if j['edits'] else ''}")
        print(f"{len(jobs)} runs")
        return
    import trl
    if trl.__version__ != TRL_MEASURED:
        print(f"note: trl {trl.__version__}; this set was measured with {TRL_MEASURED}", file=sys.stderr)
    import inspect
    import textwrap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl import PPOTrainer
    for j in jobs:                              # every anchor found before anything runs
        apply_edits(textwrap.dedent(inspect.getsource(PPOTrainer.train)), j["edits"], f"train ({j['variant']})")
    start = time.perf_counter()
    with locked(args.out):
        base_model(args.out)                   # once, before the workers need it
    sft_s = time.perf_counter() - start
    labels, failures, wall = run_jobs(train, jobs, args.out, args.jobs)
    summary = write_generation(args.out, jobs, failures, wall + sft_s, args.jobs, sft_s=round(sft_s, 1),
                               sft=json.loads((args.out / "base-model" / "sft.json").read_text()), trl=trl.__version__)
    print(json.dumps(summary))
    for f in failures:
        print(f"FAILED {f['job']['name']} {f['job']['variant']}:\n{f['error']}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
