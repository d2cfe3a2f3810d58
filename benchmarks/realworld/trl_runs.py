"""Real TRL GRPOTrainer logs, healthy and with bugs introduced the way TRL users introduce them.

    HF_HUB_OFFLINE=1 python benchmarks/realworld/trl_runs.py [--jobs 2] [--out results/realworld/trl] [--list]
        [--setting script|trl_defaults|all]

**A test set.** These logs measure how ``python -m harness.diagnose`` does on logs it never saw,
written by a real framework. Nobody may tune the diagnosis' thresholds, features or model to
them; other real logs nobody here produced will judge the result too. This script is an
independent implementation: it imports neither ``faults`` nor ``harness.agents`` (nor anything
of the harness). Needs ``trl>=1.16,<2``, ``transformers>=5.2,<6``, ``accelerate``, ``datasets``.

What runs, as a TRL user would, with no Hugging Face Hub (``HF_HUB_OFFLINE=1``):
1. a task of our own: ``sort : 3 9 1 4 1`` -> ``1 1 3 4 9`` (5 digits), two reward functions
   summed: ``correct`` (share of positions holding the right digit) and ``format_reward`` (1 when the
   completion is exactly five digits); some settings use ``correct`` alone;
2. a word-level ``tokenizers`` tokenizer and a 2-layer ``LlamaForCausalLM`` (~130k parameters) built
   from a config and saved to disk, warmed up by a short supervised loop of our own (plain PyTorch,
   ``SFT_STEPS`` steps) to a middling reward, once, shared by every run;
3. TRL's ``GRPOTrainer``, unmodified, from that checkpoint, with ``use_cpu=True``, ``bf16=False``,
   ``gradient_checkpointing=False`` and ``beta``, ``learning_rate``, ``loss_type``,
   ``num_generations``, ``num_iterations`` set explicitly (``SETTINGS``), ``logging_steps=1``,
   ``report_to=["tensorboard"]``, one checkpoint at the end (``checkpoint-<max_steps>/
   trainer_state.json`` and ``training_args.bin``) and the TensorBoard run in ``runs/``.

Two settings (``--setting``, the label's ``setting``): ``script``, the values above (``SETTINGS``),
and ``trl_defaults``, TRL's own GRPOConfig defaults (learning_rate 1e-6, beta 0, dapo, no warm-up:
``plan_trl_defaults``) with only what the CPU needs, this script's sizes and the bug's values set.

How each bug is introduced (``VARIANTS``):
- reward functions: ``correct`` alone, returning 0 for every completion (it reads a dataset column
  under the wrong name, or compares strings with ints); ``format_reward`` whose regex never matches
  the decoded text (it expects digits without the spaces the tokenizer puts between tokens);
- ``GRPOConfig`` values: ``epsilon=1e-3``; ``learning_rate`` 100x the healthy one; ``beta=-0.04``
  (TRL accepts a negative beta: the KL penalty becomes a bonus);
- code, as a user patches: a ``GRPOTrainer`` subclass negating ``self.beta`` after ``__init__``
  (config says +0.04); ``trainer.ref_model = trainer.model`` after construction (the reference
  moves with the policy); a subclass setting ``self.num_iterations = 1`` after ``__init__`` while the
  config says 2; a subclass of ``_generate_and_score_completions`` (the method that computes the old
  log-probs) that drops ``old_per_token_logps`` from its output, so the ratio is exactly 1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.realworld.common import DEFAULT_OUT, fault_of, locked, opaque_name, run_jobs, write_generation

N_DIGITS = 5
WORDS = ["<pad>", "<eos>", "<unk>"] + [str(d) for d in range(10)] + ["sort", ":"]
SFT_STEPS = 40            # a short warm-up: the policy sorts about half the positions right
SFT_LR = 3e-3
MAX_STEPS = 150           # GRPO optimizer steps per run
WARMUP_STEPS = 10         # linear warm-up, then TRL's default linear decay
LR = 1e-3                 # the healthy GRPO learning rate for this tiny model
PROMPTS_PER_STEP = 8
NUM_GENERATIONS = 8

# healthy settings (cycled over seeds): beta 0 / > 0, num_iterations 1 / 2, both loss types, one or two rewards
SETTINGS: list[dict[str, Any]] = [
    {"beta": 0.0, "num_iterations": 1, "loss_type": "dapo", "rewards": ["correct", "format_reward"]},
    {"beta": 0.04, "num_iterations": 1, "loss_type": "grpo", "rewards": ["correct", "format_reward"]},
    {"beta": 0.0, "num_iterations": 2, "loss_type": "grpo", "rewards": ["correct"]},
    {"beta": 0.04, "num_iterations": 2, "loss_type": "dapo", "rewards": ["correct", "format_reward"]},
]
HEALTHY_SEEDS = [0, 1, 2, 3, 4]
FAULT_SEEDS = [0, 1, 2, 3, 4, 5, 6, 7]
# the "trl_defaults" set: TRL's own GRPOConfig defaults (see plan_trl_defaults)
DEFAULTS_HEALTHY_SEEDS = [0, 1, 2, 3, 4]
DEFAULTS_FAULT_SEEDS = [0, 1, 2, 3]
# what the trl_defaults runs set: what the CPU needs, this script's sizes, and the logging and checkpoint
# (logging_steps=1 as in the script set: TRL's default 10 would leave 15 rows; the optimisation is untouched)
DEFAULTS_FIXED: dict[str, Any] = {
    "use_cpu": True, "bf16": False, "gradient_checkpointing": False,
    "num_generations": NUM_GENERATIONS, "per_device_train_batch_size": PROMPTS_PER_STEP * NUM_GENERATIONS,
    "max_completion_length": N_DIGITS + 3}
# what a label records of the effective GRPOConfig
RECORDED = ["learning_rate", "beta", "loss_type", "scale_rewards", "epsilon", "num_iterations", "lr_scheduler_type",
            "warmup_steps", "max_grad_norm", "temperature", "num_generations", "per_device_train_batch_size",
            "max_completion_length"]

# variant -> ways: (how, spec). spec: "config" (GRPOConfig values over the setting), "setting" (keys of
# SETTINGS forced), "rewards" (reward functions by name), "patch" (code change, see make_trainer).
VARIANTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "healthy": [("GRPOTrainer as configured (see setting)", {})],
    "reward_zero": [("correct() alone, reading kwargs['answer'] while the dataset column is 'target': 0 for all",
                     {"rewards": ["correct_wrong_column"]}),
                    ("correct() alone, comparing the completion's digit strings with int digits: 0 for all",
                     {"rewards": ["correct_str_vs_int"]})],
    "format_regex": [("format_reward with re.fullmatch(r'\\d{5}', text): the decoded text is '1 2 3 4 5', "
                      "so it never matches", {"rewards": ["correct", "format_reward_nospace"]})],
    "clip_tiny": [("GRPOConfig(epsilon=1e-3), num_iterations=2", {"config": {"epsilon": 1e-3},
                                                                  "setting": {"num_iterations": 2}})],
    "lr_high": [(f"GRPOConfig(learning_rate={LR * 100:g}): 100x the healthy {LR:g}",
                 {"config": {"learning_rate": LR * 100}})],
    "beta_neg": [("GRPOConfig(beta=-0.04): TRL accepts it; the KL penalty becomes a bonus",
                  {"config": {"beta": -0.04}}),
                 ("a GRPOTrainer subclass setting self.beta = -self.beta after __init__ (config beta=0.04)",
                  {"setting": {"beta": 0.04}, "patch": "negate_beta"})],
    "ref_is_policy": [("trainer.ref_model = trainer.model after construction (beta=0.04)",
                       {"setting": {"beta": 0.04}, "patch": "ref_is_policy"})],
    "one_epoch": [("a GRPOTrainer subclass setting self.num_iterations = 1 after __init__; config says 2",
                   {"setting": {"num_iterations": 2}, "patch": "one_iteration"})],
    "old_logp_recomputed": [("a GRPOTrainer subclass whose _generate_and_score_completions drops "
                             "old_per_token_logps (num_iterations=2): the loss uses the detached current "
                             "log-probs, ratio exactly 1", {"setting": {"num_iterations": 2},
                                                            "patch": "drop_old_logps"})],
}


def plan(healthy_seeds: list[int] = HEALTHY_SEEDS, fault_seeds: list[int] = FAULT_SEEDS,
         variants: list[str] | None = None, max_steps: int = MAX_STEPS, setting: str = "all",
         defaults_healthy_seeds: list[int] | None = None,
         defaults_fault_seeds: list[int] | None = None) -> list[dict[str, Any]]:
    """``setting`` "script" (this script's settings, ``SETTINGS``), "trl_defaults" (TRL's GRPOConfig
    defaults, ``plan_trl_defaults``) or "all" (both)."""
    jobs = []
    if setting in ("script", "all"):
        jobs += plan_script(healthy_seeds, fault_seeds, variants, max_steps)
    if setting in ("trl_defaults", "all"):
        jobs += plan_trl_defaults(DEFAULTS_HEALTHY_SEEDS if defaults_healthy_seeds is None else defaults_healthy_seeds,
                                  DEFAULTS_FAULT_SEEDS if defaults_fault_seeds is None else defaults_fault_seeds,
                                  variants, max_steps)
    return jobs


def plan_script(healthy_seeds: list[int] = HEALTHY_SEEDS, fault_seeds: list[int] = FAULT_SEEDS,
                variants: list[str] | None = None, max_steps: int = MAX_STEPS) -> list[dict[str, Any]]:
    """This script's settings. Healthy runs: every setting x every healthy seed. Each bug: once per
    fault seed, its setting cycled over seeds (then forced where the bug needs it), its ways cycled too."""
    jobs = []
    for variant, ways in VARIANTS.items():
        if variants is not None and variant not in variants:
            continue
        if variant == "healthy":
            combos = [(s, seed) for s in range(len(SETTINGS)) for seed in healthy_seeds]
        else:
            combos = [(seed % len(SETTINGS), seed) for seed in fault_seeds]
        for s, seed in combos:
            how, spec = ways[seed % len(ways)]
            setting = {**SETTINGS[s], **spec.get("setting", {})}
            if "rewards" in spec:
                setting["rewards"] = spec["rewards"]
            config = {"beta": setting["beta"], "num_iterations": setting["num_iterations"],
                      "loss_type": setting["loss_type"], "learning_rate": LR, **spec.get("config", {})}
            jobs.append({"name": opaque_name("trl", variant, how, json.dumps(setting, sort_keys=True),
                                             json.dumps(config, sort_keys=True), seed, max_steps),
                         "env": f"sort{N_DIGITS}", "variant": variant, "how": how, "seed": seed,
                         "rewards": setting["rewards"], "config": config, "patch": spec.get("patch"),
                         "max_steps": max_steps, "setting": "script"})
    return jobs


def plan_trl_defaults(healthy_seeds: list[int] = DEFAULTS_HEALTHY_SEEDS,
                      fault_seeds: list[int] = DEFAULTS_FAULT_SEEDS, variants: list[str] | None = None,
                      max_steps: int = MAX_STEPS) -> list[dict[str, Any]]:
    """TRL's own GRPOConfig defaults (learning_rate 1e-6, beta 0, loss_type dapo, scale_rewards group,
    epsilon 0.2, num_iterations 1, linear decay, no warm-up): nothing set but what the CPU needs and
    the sizes of this script (``DEFAULTS_FIXED``), rewards ``correct`` + ``format_reward``. Each bug
    as in ``VARIANTS``, its ways cycled over seeds; ``config`` holds every value moved off TRL's
    defaults, the bug's own and what the bug needs to act at all (num_iterations=2 for the ratio
    bugs, beta=0.04 for the reference and the in-code beta flip: at TRL's defaults there is no
    ratio != 1 and no reference model)."""
    jobs = []
    for variant, ways in VARIANTS.items():
        if variants is not None and variant not in variants:
            continue
        for seed in healthy_seeds if variant == "healthy" else fault_seeds:
            how, spec = ways[seed % len(ways)]
            rewards = spec.get("rewards", ["correct", "format_reward"])
            config = {**spec.get("setting", {}), **spec.get("config", {})}
            jobs.append({"name": opaque_name("trl-defaults", variant, how, json.dumps(rewards),
                                             json.dumps(config, sort_keys=True), seed, max_steps),
                         "env": f"sort{N_DIGITS}", "variant": variant,
                         "how": "GRPOConfig at TRL's defaults" if variant == "healthy" else how, "seed": seed,
                         "rewards": rewards, "config": config, "patch": spec.get("patch"), "max_steps": max_steps,
                         "setting": "trl_defaults"})
    return jobs


# ---- the task ------------------------------------------------------------------------------------
def make_dataset(n: int = 512, seed: int = 1234) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        digits = [rng.randrange(10) for _ in range(N_DIGITS)]
        rows.append({"prompt": "sort : " + " ".join(map(str, digits)), "target": " ".join(map(str, sorted(digits)))})
    return rows


def correct(completions: list[str], target: list[str], **kwargs: Any) -> list[float]:
    """Share of the positions holding the right digit."""
    return [sum(a == b for a, b in zip(c.split(), t.split())) / N_DIGITS for c, t in zip(completions, target)]


def format_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """1 when the completion is exactly N_DIGITS digits."""
    return [1.0 if re.fullmatch(rf"\d( \d){{{N_DIGITS - 1}}}", c.strip()) else 0.0 for c in completions]


# the users' buggy versions (same function names: TRL logs rewards/<name>/mean, a user's log would too)
def correct_wrong_column(completions: list[str], **kwargs: Any) -> list[float]:
    answers = kwargs.get("answer") or [""] * len(completions)       # the column is called "target"
    return [sum(a == b for a, b in zip(c.split(), str(t).split())) / N_DIGITS for c, t in zip(completions, answers)]


def correct_str_vs_int(completions: list[str], target: list[str], **kwargs: Any) -> list[float]:
    return [sum(a == b for a, b in zip(c.split(), map(int, t.split()))) / N_DIGITS
            for c, t in zip(completions, target)]


def format_reward_nospace(completions: list[str], **kwargs: Any) -> list[float]:
    return [1.0 if re.fullmatch(rf"\d{{{N_DIGITS}}}", c.strip()) else 0.0 for c in completions]


correct_wrong_column.__name__ = correct_str_vs_int.__name__ = "correct"
format_reward_nospace.__name__ = "format_reward"
REWARD_FUNCS = {"correct": correct, "format_reward": format_reward, "correct_wrong_column": correct_wrong_column,
                "correct_str_vs_int": correct_str_vs_int, "format_reward_nospace": format_reward_nospace}


# ---- the warm-started model (once) ---------------------------------------------------------------
def base_model(root: Path) -> Path:
    """Tokenizer + 2-layer Llama from a config, warmed up by a short SFT loop; saved once under root."""
    out = root / "base-model"
    if (out / "sft.json").exists():
        return out
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(WORDS), hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=32, pad_token_id=0, eos_token_id=1, bos_token_id=1,
        tie_word_embeddings=True))
    rows = make_dataset(4096, seed=99)
    opt = torch.optim.AdamW(model.parameters(), lr=SFT_LR)
    eos = tokenizer.eos_token_id
    model.train()
    for step in range(SFT_STEPS):
        ids, labels = [], []
        for r in rows[step * 64:(step + 1) * 64]:
            p = tokenizer(r["prompt"])["input_ids"]
            c = tokenizer(r["target"])["input_ids"] + [eos]
            ids.append(p + c)
            labels.append([-100] * len(p) + c)
        loss = model(input_ids=torch.tensor(ids), labels=torch.tensor(labels)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    # what the warm-up reached: sampled completions (temperature 1, as GRPO samples) on held-out prompts
    model.eval()
    test = make_dataset(256, seed=7)
    with torch.no_grad():
        enc = torch.tensor([tokenizer(r["prompt"])["input_ids"] for r in test])
        gen = model.generate(enc, max_new_tokens=N_DIGITS + 3, do_sample=True, temperature=1.0,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
    texts = [tokenizer.decode(g[enc.shape[1]:], skip_special_tokens=True) for g in gen]
    stats = {"sft_steps": SFT_STEPS, "sft_lr": SFT_LR, "final_loss": round(loss.item(), 4),
             "params": sum(p.numel() for p in model.parameters()),
             "correct": sum(correct(texts, [r["target"] for r in test])) / len(test),
             "format_reward": sum(format_reward(texts)) / len(test)}
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "sft.json").write_text(json.dumps(stats, indent=1) + "\n")
    return out


# ---- the users' code changes ---------------------------------------------------------------------
def make_trainer(patch: str | None, **kwargs: Any):
    from trl import GRPOTrainer

    if patch == "negate_beta":
        class Trainer(GRPOTrainer):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, **kw)
                self.beta = -self.beta            # "the KL term should reward staying close" (it no longer does)
    elif patch == "one_iteration":
        class Trainer(GRPOTrainer):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, **kw)
                self.num_iterations = 1           # left in from a speed test; args.num_iterations still says 2
    elif patch == "drop_old_logps":
        class Trainer(GRPOTrainer):
            def _generate_and_score_completions(self, inputs: Any) -> Any:
                out = super()._generate_and_score_completions(inputs)
                out.pop("old_per_token_logps", None)   # "saves memory": the loss falls back to the current logps
                return out
    else:
        Trainer = GRPOTrainer
    trainer = Trainer(**kwargs)
    if patch == "ref_is_policy":
        trainer.ref_model = trainer.model        # "no need for a second copy"
    return trainer


def train(job: dict[str, Any], root: Path) -> dict[str, dict[str, Any]]:
    """One GRPO run into ``root/<opaque name>/``; returns its label {log path: label}."""
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast, PrinterCallback
    from trl import GRPOConfig

    start = time.perf_counter()
    model_dir = base_model(root)
    run_dir = root / job["name"]
    cfg = job["config"]
    setting = job.get("setting", "script")
    # the run's output: logging, one checkpoint at the end (no effect on the optimisation)
    output = {"output_dir": str(run_dir), "seed": job["seed"], "max_steps": job["max_steps"],
              "logging_steps": job.get("logging_steps", 1),      # 1 for the test set (probe_runs.py: TRL's default 10)
              "report_to": ["tensorboard"], "save_strategy": "steps", "save_steps": job["max_steps"],
              "save_only_model": True, "disable_tqdm": True, "dataloader_num_workers": 0}
    if setting == "script":
        args = GRPOConfig(
            **output, use_cpu=True, bf16=False, gradient_checkpointing=False,
            learning_rate=cfg["learning_rate"], beta=cfg["beta"], loss_type=cfg["loss_type"],
            num_iterations=cfg["num_iterations"], epsilon=cfg.get("epsilon", 0.2),
            num_generations=NUM_GENERATIONS, per_device_train_batch_size=PROMPTS_PER_STEP * NUM_GENERATIONS,
            max_completion_length=N_DIGITS + 3, temperature=1.0, warmup_steps=WARMUP_STEPS)
    else:                                  # TRL's defaults but for the CPU, the sizes and the bug's values
        args = GRPOConfig(**output, **DEFAULTS_FIXED, **cfg)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    trainer = make_trainer(job["patch"], model=str(model_dir), processing_class=tokenizer, args=args,
                           reward_funcs=[REWARD_FUNCS[r] for r in job["rewards"]],
                           train_dataset=Dataset.from_list(make_dataset()))
    trainer.remove_callback(PrinterCallback)   # disable_tqdm prints every log line otherwise
    trainer.train()
    state = run_dir / f"checkpoint-{job['max_steps']}" / "trainer_state.json"
    if not state.exists():
        raise RuntimeError(f"no {state} after training")
    tb = sorted(p.parent for p in (run_dir / "runs").rglob("events.out.tfevents*"))
    label = {"framework": "trl", "env": job["env"], "variant": job["variant"], "fault": fault_of(job["variant"]),
             "how": job["how"], "seed": job["seed"], "name": job["name"], "max_steps": job["max_steps"],
             "setting": setting, "reward_funcs": job["rewards"],
             "hyperparameters": {k: getattr(getattr(args, k), "value", getattr(args, k)) for k in RECORDED},
             # script: the values this script sets; trl_defaults: every value moved off TRL's defaults
             "config": cfg,
             "tensorboard": str(tb[-1].relative_to(root)) if tb else None,
             "wall_s": round(time.perf_counter() - start, 2)}
    return {str(state.relative_to(root)): label}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "trl", help="where the logs and labels.json go")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one torch thread each)")
    parser.add_argument("--variants", nargs="+", default=None, help=f"default: all of {', '.join(VARIANTS)}")
    parser.add_argument("--healthy-seeds", type=int, nargs="+", default=HEALTHY_SEEDS)
    parser.add_argument("--fault-seeds", type=int, nargs="+", default=FAULT_SEEDS)
    parser.add_argument("--defaults-healthy-seeds", type=int, nargs="+", default=DEFAULTS_HEALTHY_SEEDS)
    parser.add_argument("--defaults-fault-seeds", type=int, nargs="+", default=DEFAULTS_FAULT_SEEDS)
    parser.add_argument("--setting", choices=["script", "trl_defaults", "all"], default="all",
                        help="this script's settings, TRL's GRPOConfig defaults, or both (default)")
    parser.add_argument("--max-steps", type=int, default=MAX_STEPS)
    parser.add_argument("--list", action="store_true", help="print the plan and stop")
    args = parser.parse_args()
    jobs = plan(args.healthy_seeds, args.fault_seeds, args.variants, args.max_steps, args.setting,
                args.defaults_healthy_seeds, args.defaults_fault_seeds)
    if args.list:
        for j in jobs:
            print(f"{j['name']}  {j['setting']:12s} seed {j['seed']}  {j['variant']:20s} {j['config']} "
                  f"{j['rewards']} {j['patch']}")
        print(f"{len(jobs)} runs")
        return
    start = time.perf_counter()
    with locked(args.out):
        base_model(args.out)                   # once, before the workers need it
    sft_s = time.perf_counter() - start
    labels, failures, wall = run_jobs(train, jobs, args.out, args.jobs)
    summary = write_generation(args.out, jobs, failures, wall + sft_s, args.jobs, key=args.setting,
                               sft_s=round(sft_s, 1), sft=json.loads((args.out / "base-model" / "sft.json").read_text()))
    print(json.dumps(summary))
    for f in failures:
        print(f"FAILED {f['job']['name']} {f['job']['variant']}:\n{f['error']}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
