"""What seed-batching could gain for native GRPO: S seeds' work as S calls against one call S times as large.

Issue 23 asks for seed-batched GRPO "as far as the same mechanism carries". Before building it, this
measures its ceiling on the catalogue's GRPO setting (the default transformer: 2-layer Llama, d_model
64; 16 prompts x 8 completions of <= 10 tokens): the two costs of an update, (1) generation with the
KV cache, 10 decoding steps of 128 sequences, and (2) the update's forward and backward over prompt +
completion (2 iterations x 2 minibatches of 64 sequences), are timed for S seeds done one after the
other (S calls of the normal size, S models) and as one call of S times the rows on one model. One
model on S x the rows is an upper bound on any stacked-weights engine (per-seed weights add batched
matmuls and per-seed optimiser state on top), so ``ceiling`` = separate / together bounds what
seed-batching GRPO could give. One torch thread, as runs train.

    python benchmarks/grpo_batching.py [--sizes 1,4,16] [--repeats 5] [--record]

``--record`` writes benchmarks/results/grpo_batching.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT_LEN = 14         # prompt tokens per sequence (the token task's prompts are about this long)


def setting():
    """The default GRPO experiment's algorithm config (its batch, completion length, iterations and
    minibatches) and its model's spec."""
    from harness.agents.llama import Llama
    from harness.agents.lm import llama_spec
    from harness.pipeline.compose import make_experiment

    exp = make_experiment(["algo=grpo", "env=toyseq", "fault=none", "results_dir=/tmp/grpo_batching"])
    special = type("Special", (), {"pad": 0, "bos": 1, "eos": 2})
    spec = llama_spec(exp.algo, vocab_size=32, max_positions=PROMPT_LEN + exp.algo.max_new_tokens, special=special)
    return exp.algo, spec, Llama


def generation(model, rows: int, new: int) -> None:
    """Sampled decoding of ``new`` tokens for ``rows`` sequences with the KV cache, as the sampler does."""
    from harness.agents.llama import real_positions

    prompts = torch.randint(3, 32, (rows, PROMPT_LEN))
    attn = torch.ones(rows, PROMPT_LEN, dtype=torch.bool)
    with torch.no_grad():
        cache = model.new_cache(rows, PROMPT_LEN + new)
        logits = model(prompts, attn, real_positions(attn), cache)[:, -1]
        for _ in range(new):
            token = torch.distributions.Categorical(logits=logits).sample()
            attn = torch.cat([attn, torch.ones(rows, 1, dtype=torch.bool)], dim=1)
            logits = model(token[:, None], attn, real_positions(attn)[:, -1:], cache)[:, -1]


def update(model, opt, rows: int, algo) -> None:
    """Forward and backward over prompt + completion for ``rows`` sequences, ``num_iterations`` passes
    of ``n_minibatches`` minibatches, as the update does."""
    from harness.agents.llama import real_positions

    ids = torch.randint(3, 32, (rows, PROMPT_LEN + algo.max_new_tokens))
    mask = torch.ones_like(ids, dtype=torch.bool)
    for _ in range(algo.num_iterations):
        for mb in ids.chunk(algo.n_minibatches):
            logits = model(mb, mask[: len(mb)], real_positions(mask[: len(mb)]))
            loss = logits.float().log_softmax(-1)[..., 0].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


def timed(fn, repeats: int) -> float:
    fn()                                            # first-call costs, untimed
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,4,16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    algo, spec, Llama = setting()
    rows, new = algo.batch_size, algo.max_new_tokens
    out = []
    for size in (int(s) for s in args.sizes.split(",")):
        models = [Llama(spec) for _ in range(size)]
        opts = [torch.optim.Adam(m.parameters(), lr=1e-4) for m in models]
        big, big_opt = models[0], opts[0]
        for part in ("generation", "update"):
            if part == "generation":
                separate = timed(lambda: [generation(m, rows, new) for m in models], args.repeats)
                together = timed(lambda: generation(big, rows * size, new), args.repeats)
            else:
                separate = timed(lambda: [update(m, o, rows, algo) for m, o in zip(models, opts)], args.repeats)
                together = timed(lambda: update(big, big_opt, rows * size, algo), args.repeats)
            row = {"seeds": size, "part": part, "separate_s": round(separate, 4), "together_s": round(together, 4),
                   "ceiling": round(separate / together, 2)}
            out.append(row)
            print(json.dumps(row), flush=True)
    if args.record:
        path = ROOT / "benchmarks" / "results" / "grpo_batching.json"
        path.write_text(json.dumps({"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                    "machine": platform.machine(), "torch": torch.__version__, "threads": 1,
                                    "command": "python benchmarks/grpo_batching.py " + " ".join(sys.argv[1:]),
                                    "rows_per_seed": rows, "tokens": new, "prompt_len": PROMPT_LEN,
                                    "d_model": spec.d_model, "n_layers": spec.n_layers, "rows": out}, indent=1) + "\n")
        print(f"recorded -> {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
