"""The rollout engine: a separate copy of the policy that generates, as vLLM does beside an FSDP
trainer.

It holds its own weights (a cast copy: fp32, bf16 or fp16), refreshed from the trainer on a
schedule (every ``sync_every`` updates; with ``lag`` > 0 from a queue of past versions, as an
asynchronous pipeline whose rollouts are ``lag`` updates old), and samples with its own
temperature, top-k and top-p. It records the log-prob of each sampled token under the
distribution it sampled from (vLLM's ``processed_logprobs``: after temperature and top-k/top-p
renormalisation). Generation is batched over every completion and uses a KV cache: one forward
step per new token.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass

import torch
from torch import nn

from harness.agents.llama import real_positions
from harness.hooks import Hooks

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Generation:
    """What a rollout returns: completions [B, T] (PAD after EOS), the sampler's log-probs
    [B, T] (0 outside ``mask``), ``mask`` (generated tokens up to and including EOS),
    ``lengths`` (tokens generated, EOS included) and ``ended`` (closed by EOS, not cut)."""

    tokens: torch.Tensor
    logp: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    ended: torch.Tensor


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p (nucleus) filtering: dropped tokens get -inf (vLLM / HF order)."""
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -torch.inf)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs > top_p          # keep the smallest prefix with mass >= top_p
        drop[..., 0] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), -torch.inf)
    return logits


class Sampler:
    def __init__(self, policy: nn.Module, precision: str = "fp32", lag: int = 0):
        self.dtype = PRECISIONS[precision]
        self.model = copy.deepcopy(policy).to(self.dtype).eval().requires_grad_(False)
        self.versions: deque[tuple[int, dict[str, torch.Tensor]]] = deque()
        self.lag = lag              # how many updates old the weights a sync loads are
        self.version = 0            # the trainer update whose weights it holds
        self.uses_cache = hasattr(self.model, "new_cache")

    def push(self, policy: nn.Module, update: int, lag: int | None = None) -> None:
        """Queue the trainer's current weights (called at every update, before generating),
        keeping the ``lag`` + 1 newest versions."""
        self.lag = self.lag if lag is None else lag
        self.versions.append((update, {k: v.detach().clone() for k, v in policy.state_dict().items()}))
        while len(self.versions) > self.lag + 1:
            self.versions.popleft()

    def set_precision(self, precision: str) -> None:
        """Cast the sampler's weights (a fault may change the precision mid-run)."""
        if PRECISIONS[precision] != self.dtype:
            self.dtype = PRECISIONS[precision]
            self.model.to(self.dtype)

    def sync(self) -> None:
        """Load the version ``lag`` updates old (the oldest queued while the queue fills), cast
        to the sampler's precision."""
        update, state = self.versions[0]
        self.model.load_state_dict(state)   # load_state_dict copies into the cast parameters
        self.version = update

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, max_new: int, eos: int, pad: int,
                 temperature: float, top_k: int, top_p: float, hooks: Hooks, also_stop: int | None = None
                 ) -> Generation:
        b = prompts.shape[0]
        model = self.model
        model.train(hooks.dropout_active("rollout"))
        tokens = torch.full((b, max_new), pad, dtype=torch.long)
        logps = torch.zeros(b, max_new)
        mask = torch.zeros(b, max_new, dtype=torch.bool)
        alive = torch.ones(b, dtype=torch.bool)
        ended = torch.zeros(b, dtype=torch.bool)
        attn = prompt_mask.clone()
        t_sample = hooks.logprob_temperature(temperature, "sampler")
        cache = model.new_cache(b, prompts.shape[1] + max_new) if self.uses_cache else None
        if cache is not None:
            logits = model(prompts, attn, real_positions(attn), cache)[:, -1]
        for t in range(max_new):
            if cache is None:   # no cache (the MLP): the whole sequence so far
                seq = torch.cat([prompts, tokens[:, :t]], dim=1)
                logits = model(seq, torch.cat([prompt_mask, mask[:, :t]], dim=1))[:, -1]
            logits = hooks.sampler_logits(logits.float())
            logp_all = filter_logits(logits / t_sample, top_k, top_p).log_softmax(-1)
            gumbel = torch.rand_like(logp_all).log_().neg_().log_().neg_()
            token = (logp_all + gumbel).argmax(-1)
            token = torch.where(alive, token, pad)
            tokens[:, t] = token
            logps[:, t] = torch.where(alive, logp_all.gather(-1, token[:, None]).squeeze(-1), 0.0)
            mask[:, t] = alive
            hit = alive & ((token == eos) if also_stop is None else ((token == eos) | (token == also_stop)))
            ended |= hit
            alive &= ~hit
            if not alive.any():
                break
            if cache is not None:
                attn = torch.cat([attn, mask[:, t:t + 1]], dim=1)
                pos = real_positions(attn)[:, -1:]
                logits = model(token[:, None], attn, pos, cache)[:, -1]
        steps = t + 1
        return Generation(tokens[:, :steps].contiguous(), logps[:, :steps].contiguous(), mask[:, :steps].contiguous(),
                          mask[:, :steps].sum(1), ended)
