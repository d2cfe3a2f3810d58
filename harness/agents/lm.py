"""Causal-LM helpers shared by the GRPO trainer, its sampler and the supervised warm-up.

A batch is a left-padded prompt block ``[B, P]`` (``prompt_mask`` False on padding) followed by
completions ``[B, T]`` (``completion_mask`` True on generated tokens up to and including the
first EOS). The logits at position ``i`` predict the token at ``i + 1``: a completion token at
``P + j`` is scored by the logits at ``P + j - shift`` with ``shift = 1`` (the standard
alignment; a fault may change it through the ``logit_shift`` hook).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.agents.llama import Llama, LlamaSpec, real_positions
from harness.agents.networks import MLPLM
from harness.agents.sampler import filter_logits

MODELS = ("transformer", "mlp")


def build_model(cfg: Any, vocab_size: int, prompt_width: int, max_new: int, special: Any) -> nn.Module:
    """The policy network named by ``cfg.model`` (GRPOConfig), freshly initialised."""
    if cfg.model == "mlp":
        return MLPLM(prompt_width, max_new, vocab_size, cfg.hidden)
    return Llama(llama_spec(cfg, vocab_size, prompt_width + max_new, special))


def llama_spec(cfg: Any, vocab_size: int, max_positions: int, special: Any) -> LlamaSpec:
    return LlamaSpec(vocab_size=vocab_size, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                     d_ff=cfg.d_ff, max_positions=max_positions, tie_embeddings=cfg.tie_embeddings,
                     dropout=cfg.dropout, pad_token_id=special.pad, bos_token_id=special.bos,
                     eos_token_id=special.eos)


def completion_logits(model: nn.Module, prompts: torch.Tensor, prompt_mask: torch.Tensor,
                      completions: torch.Tensor, completion_mask: torch.Tensor, shift: int = 1) -> torch.Tensor:
    """Logits [B, T, V] (fp32) for each completion token, from one forward pass over prompt +
    completion with the completion mask as attention mask (TRL's ``_get_per_token_logps``)."""
    input_ids = torch.cat([prompts, completions], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    logits = model(input_ids, mask, real_positions(mask))
    p, t = prompts.shape[1], completions.shape[1]
    return logits[:, p - shift: p - shift + t].float()


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                   top_p: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-prob of ``tokens`` and entropy under softmax(logits / temperature), truncated by
    top-k / top-p as the sampler truncates (``filter_logits``) when either is set; the scored token
    keeps its own logit, so a rounding difference at the truncation edge cannot make it -inf (as
    prime-rl's replay does)."""
    scaled = logits / temperature
    if top_k > 0 or top_p < 1.0:
        index = tokens.unsqueeze(-1)
        scaled = filter_logits(scaled, top_k, top_p).scatter(-1, index, scaled.gather(-1, index))
    logp_all = scaled.log_softmax(-1)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    p = logp_all.exp()
    entropy = -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)     # 0 log 0 = 0, with a finite gradient
    return logp, entropy
