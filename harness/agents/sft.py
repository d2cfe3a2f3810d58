"""The supervised warm-up: the GRPO start checkpoint, which is also the frozen KL reference.

As RL fine-tuning of an LLM starts from an instruction-tuned model, GRPO here starts from a
short supervised run (cross-entropy on completion tokens, prompt tokens masked) on noisy
demonstrations of the task (``ToySeqVectorEnv.demonstrations``: some answer digits wrong,
some completions badly formatted), so the policy starts at a middling reward with the
entropy of its imperfect teacher.

The checkpoint depends only on the model, the task's shape and the SFT settings (never on the
run's seed or fault), so every run with the same config shares it: it is cached in the run
store as ``<results_dir>/checkpoints/<hash>/`` (``model.pt`` and ``meta.json``, written
atomically, meta last, with the size and SHA-256 of ``model.pt``; a missing, truncated or
changed file makes the checkpoint corrupt and it is trained again). Training is seeded and
single-process, so the same config gives the same weights.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.agents.lm import build_model, completion_logits
from harness.config import Experiment
from harness.envs.toyseq import ToySeqVectorEnv
from harness.store import RunStore, atomic_write_bytes, atomic_write_json, file_digest

SFT_VERSION = 1          # bump when the warm-up's code changes what it produces
TASK_KEYS = ("task", "prompt_len", "min_prompt_len", "n_digits", "max_len")
MODEL_FILE, META_FILE = "model.pt", "meta.json"


def task_env(exp: Experiment, num_envs: int = 1) -> ToySeqVectorEnv:
    return ToySeqVectorEnv(num_envs=num_envs, **exp.env.kwargs)


def checkpoint_key(exp: Experiment) -> dict[str, Any]:
    kwargs = {**{k: getattr(task_env(exp), k) for k in TASK_KEYS}}
    return {"sft_version": SFT_VERSION, "algo": exp.algo.sft_config(), "task": kwargs,
            "torch_threads": exp.torch_threads}


def checkpoint_dir(exp: Experiment) -> Path:
    digest = hashlib.sha256(json.dumps(checkpoint_key(exp), sort_keys=True).encode()).hexdigest()[:12]
    return Path(exp.results_dir) / "checkpoints" / f"sft-{exp.algo.model}-{digest}"


def problem(path: Path) -> str | None:
    """Why the checkpoint at ``path`` is not usable (absent, unfinished, corrupt), or None."""
    try:
        meta = json.loads((path / META_FILE).read_text())
    except FileNotFoundError:
        return "absent"
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "meta.json is not valid JSON"
    expected = (meta.get("files") or {}).get(MODEL_FILE)
    if expected is None:
        return "meta.json lists no model file"
    if not (path / MODEL_FILE).exists():
        return f"{MODEL_FILE} is missing"
    if file_digest(path / MODEL_FILE) != expected:
        return f"{MODEL_FILE} does not match the size and checksum recorded in meta.json"
    return None


def load_checkpoint(exp: Experiment) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The warm-up weights and their meta for ``exp``, training and caching them first if needed.

    Training it leaves the global torch random state as it was: a run that trains the warm-up and
    one that finds it cached draw the same completions (they did not, until the warm-up was forked)."""
    path = checkpoint_dir(exp)
    with RunStore(exp.results_dir).lock(path.name):
        why = problem(path)
        if why is not None:
            if why != "absent":
                print(f"checkpoint {path.name} is corrupt ({why}): training it again", file=sys.stderr)
            with torch.random.fork_rng(devices=[]):    # the caller's random stream is the same either way
                train_checkpoint(exp, path)
        meta = json.loads((path / META_FILE).read_text())
        state = torch.load(path / MODEL_FILE, weights_only=True)
    return state, meta


def initial_model(cfg: Any, env: Any) -> torch.nn.Module:
    """The model the warm-up starts from: built from the config at the warm-up's seed (reseeds torch)."""
    torch.manual_seed(cfg.sft_seed)
    return build_model(cfg, env.vocab.size, env.prompt_width, env.max_len, env.vocab)


def base_state(exp: Experiment) -> dict[str, torch.Tensor]:
    """The weights the warm-up started from (its "base model"), the caller's random stream untouched."""
    with torch.random.fork_rng(devices=[]):
        return initial_model(exp.algo, task_env(exp)).state_dict()


def train_checkpoint(exp: Experiment, path: Path) -> None:
    cfg = exp.algo
    env = task_env(exp)
    vocab = env.vocab
    start = time.perf_counter()
    rng = np.random.default_rng(cfg.sft_seed)
    model = initial_model(cfg, env)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.sft_lr, fused=True)
    warmup = max(1, cfg.sft_steps // 10)        # linear warm-up, then cosine decay to 0
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) / warmup, 0.5 * (
        1 + math.cos(math.pi * min(1.0, max(0, s + 1 - warmup) / max(1, cfg.sft_steps - warmup))))))
    n = cfg.sft_steps * cfg.sft_batch
    prompts, completions, lengths = (torch.as_tensor(a) for a in env.demonstrations(
        max(n, 1), rng, cfg.sft_digit_noise, cfg.sft_format_noise))
    losses = []
    model.train()
    for step in range(cfg.sft_steps):
        rows = slice(step * cfg.sft_batch, (step + 1) * cfg.sft_batch)
        comp = completions[rows]
        mask = torch.arange(comp.shape[1])[None, :] < lengths[rows][:, None]
        logits = completion_logits(model, prompts[rows], prompts[rows] != vocab.pad, comp, mask)
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), comp, reduction="none")
        loss = (nll * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    atomic_write_bytes(path / MODEL_FILE, buffer.getvalue())
    meta = {
        "key": checkpoint_key(exp),
        "model": cfg.model,
        "spec": model.spec.to_dict() if hasattr(model, "spec") else None,
        "vocab": vocab.tokens(),
        "special_tokens": {"pad": vocab.pad, "bos": vocab.bos, "eos": vocab.eos},
        "prompt_width": env.prompt_width,
        "max_len": env.max_len,
        "loss_first": losses[0] if losses else None,
        "loss_last": float(np.mean(losses[-20:])) if losses else None,
        "wall_s": round(time.perf_counter() - start, 3),
        "files": {MODEL_FILE: file_digest(path / MODEL_FILE)},
    }
    atomic_write_json(path / META_FILE, meta)    # last: its presence marks the checkpoint complete
