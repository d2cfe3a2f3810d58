"""GRPO speed: the native trainer vs TRL's GRPOTrainer on the same transformer, task and batch.

Both start from the same supervised warm-up checkpoint (harness/agents/sft.py; trained once,
before timing) with the default GRPO hyperparameters (16 prompts x 8 completions of <= 10 tokens
per update, 2 iterations x 2 minibatches, one torch thread). Native: the harness path with the
run store and every canonical metric. TRL (when the ``[trl]`` extra is installed): GRPOTrainer,
unmodified, with the checkpoint exported as a LlamaForCausalLM and the same reward functions,
arguments mapped by ``harness.agents.hf.trl_grpo_args``; generation with transformers'
``generate`` (no vLLM on CPU). Tokens/s counts generated completion tokens (up to and including
EOS) per second of training (generation and update together): natively the run's ``env_step``; in
TRL the ``completion_ids`` its reward functions receive, once per generation batch (counting from
logged ``completions/mean_length`` depends on how often TRL logs a generation: it undercounted 4x).

    python benchmarks/grpo_speed.py [--updates N] [--skip-trl]

The last line is ``native_tokens_per_s=N trl_tokens_per_s=N ratio=R`` (TRL fields "-" when skipped).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch

UPDATES = 30


def native(updates: int, results_dir: str) -> float:
    from harness.agents import sft
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.train import get_or_train

    probe = make_experiment(["algo=grpo", "env=toyseq", f"results_dir={results_dir}"])
    per_update = probe.algo.batch_size * probe.algo.max_new_tokens
    exp = make_experiment(["algo=grpo", "env=toyseq", "fault=none", f"results_dir={results_dir}",
                           f"env.total_timesteps={updates * per_update}"])
    sft.load_checkpoint(exp)                       # the shared warm-up, not timed
    start = time.perf_counter()
    res = get_or_train(exp)
    wall = time.perf_counter() - start
    assert res.meta["status"] == "ok", res.meta["error"]
    return int(res.metrics["env_step"].iloc[-1]) / wall


def trl(updates: int, results_dir: str) -> float | None:
    try:
        import datasets
        import transformers
        import trl as trl_lib
    except ImportError:
        return None
    from harness.agents import sft
    from harness.agents.hf import export_hf, trl_grpo_args
    from harness.pipeline.compose import make_experiment

    os.environ["HF_HUB_OFFLINE"] = "1"
    exp = make_experiment(["algo=grpo", "env=toyseq", f"results_dir={results_dir}"])
    cfg = exp.algo
    sft.load_checkpoint(exp)
    model_dir = export_hf(sft.checkpoint_dir(exp), os.path.join(results_dir, "hf"))
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    env = sft.task_env(exp)
    rows = env.prompt_texts(cfg.n_prompts * updates * 2, np.random.default_rng(0))
    dataset = datasets.Dataset.from_list(rows)

    generated = [0]

    def reward(name: str):
        def fn(prompts, completions, completion_ids, answer, **kwargs):
            if name == "format":          # every generation batch is scored once: count its tokens there
                generated[0] += sum(len(ids) for ids in completion_ids)
            return env.score_completion_ids(completion_ids, answer)[name]
        fn.__name__ = name
        return fn

    args = trl_lib.GRPOConfig(output_dir=os.path.join(results_dir, "trl"), logging_steps=1,
                              max_steps=updates * cfg.n_minibatches * cfg.num_iterations, save_strategy="no",
                              reward_weights=[env.reward_weights[n] for n in ("format", "correct")],
                              seed=0, **trl_grpo_args(cfg))
    trainer = trl_lib.GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=dataset,
                                  reward_funcs=[reward("format"), reward("correct")])
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    return generated[0] / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=UPDATES)
    parser.add_argument("--skip-trl", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        native_tps = native(args.updates, tmp)
        trl_tps = None if args.skip_trl else trl(args.updates, tmp)
    if trl_tps is None:
        print(f"native_tokens_per_s={native_tps:.0f} trl_tokens_per_s=- ratio=-")
    else:
        print(f"native_tokens_per_s={native_tps:.0f} trl_tokens_per_s={trl_tps:.0f} ratio={native_tps / trl_tps:.2f}")


if __name__ == "__main__":
    main()
