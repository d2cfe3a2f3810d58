"""A small causal transformer, architecturally identical to Hugging Face's ``LlamaForCausalLM``.

RMSNorm (computed in fp32, as HF does), rotary position embeddings (``rope_theta``, the
half-split rotation), SwiGLU MLP (``down(silu(gate(x)) * up(x))``), no biases, optional tied
input/output embeddings. :func:`hf_state_dict` maps the parameters to HF's names so the same
weights load into ``transformers.LlamaForCausalLM`` built from :func:`hf_config` (see
``harness/agents/hf.py``); tests/agents/test_llama_parity.py checks the logits agree. This module
is native PyTorch only: it never imports transformers.

Inputs follow the LLM conventions: left-padded prompts, a boolean ``attention_mask`` (False
on padding and on anything after a completion's EOS), ``position_ids`` counting real tokens
(:func:`real_positions`, as HF ``generate`` does; RoPE depends only on relative positions, so
any offset gives the same logits up to rounding). A :class:`KVCache` makes generation cost
one new token per step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaSpec:
    """The sizes of the model (HF ``LlamaConfig`` names in comments)."""

    vocab_size: int
    d_model: int = 64            # hidden_size
    n_layers: int = 2            # num_hidden_layers
    n_heads: int = 4             # num_attention_heads (= num_key_value_heads: no grouped KV)
    d_ff: int = 172              # intermediate_size
    max_positions: int = 64      # max_position_embeddings
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6        # rms_norm_eps
    tie_embeddings: bool = False  # tie_word_embeddings
    dropout: float = 0.0         # attention_dropout
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


class KVCache:
    """Keys and values of every layer for ``max_len`` positions, filled left to right."""

    def __init__(self, spec: LlamaSpec, batch: int, max_len: int, dtype: torch.dtype):
        shape = (batch, spec.n_heads, max_len, spec.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(spec.n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(spec.n_layers)]
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]


class Attention(nn.Module):
    def __init__(self, spec: LlamaSpec):
        super().__init__()
        d, h = spec.d_model, spec.n_heads * spec.head_dim
        self.q_proj = nn.Linear(d, h, bias=False)
        self.k_proj = nn.Linear(d, h, bias=False)
        self.v_proj = nn.Linear(d, h, bias=False)
        self.o_proj = nn.Linear(h, d, bias=False)
        self.n_heads, self.head_dim, self.dropout = spec.n_heads, spec.head_dim, spec.dropout

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                cache: KVCache | None, layer: int) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = (proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(layer, k, v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, spec: LlamaSpec):
        super().__init__()
        self.gate_proj = nn.Linear(spec.d_model, spec.d_ff, bias=False)
        self.up_proj = nn.Linear(spec.d_model, spec.d_ff, bias=False)
        self.down_proj = nn.Linear(spec.d_ff, spec.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, spec: LlamaSpec):
        super().__init__()
        self.input_layernorm = RMSNorm(spec.d_model, spec.rms_eps)
        self.self_attn = Attention(spec)
        self.post_attention_layernorm = RMSNorm(spec.d_model, spec.rms_eps)
        self.mlp = MLP(spec)

    def forward(self, x, cos, sin, mask, cache, layer):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


def real_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens from 0 (left padding gets 0), as HF ``generate`` does."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


class Llama(nn.Module):
    """``forward(input_ids, attention_mask, position_ids, cache) -> logits`` for every position."""

    def __init__(self, spec: LlamaSpec):
        super().__init__()
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.d_model)
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec.n_layers))
        self.norm = RMSNorm(spec.d_model, spec.rms_eps)
        self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.rotary = Rotary(spec.head_dim, spec.rope_theta)
        self.reset_parameters()
        if spec.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def reset_parameters(self) -> None:
        """HF's Llama initialisation: normal(0, 0.02) for linear and embedding weights."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache(self.spec, batch, max_len, self.embed_tokens.weight.dtype)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """Logits [B, S, V]. ``attention_mask`` [B, past + S] (bool) covers the cached positions
        too; a query attends to earlier real keys and always to itself (a padding row then has
        something to attend to; its output is never used)."""
        b, s = input_ids.shape
        past = cache.length if cache is not None else 0
        if position_ids is None:
            position_ids = real_positions(attention_mask)[:, past:]
        keys = attention_mask.bool()[:, None, None, :]                         # [B, 1, 1, past + S]
        q_pos = torch.arange(past, past + s)[:, None]
        k_pos = torch.arange(past + s)[None, :]
        mask = ((k_pos <= q_pos) & keys) | (k_pos == q_pos)                    # [B, 1, S, past + S]
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary(position_ids, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, cache, i)
        if cache is not None:
            cache.length += s
        return self.lm_head(self.norm(x))


# ---- Hugging Face names ------------------------------------------------------------------

def hf_state_dict(model: Llama) -> dict[str, torch.Tensor]:
    """The model's parameters under ``LlamaForCausalLM``'s names (``model.layers.0.self_attn.q_proj.weight``...)."""
    out = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("rotary."):
            continue
        out[name if name.startswith("lm_head.") else f"model.{name}"] = tensor.detach().clone()
    if model.spec.tie_embeddings:
        out.pop("lm_head.weight", None)
    return out


def from_hf_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of :func:`hf_state_dict` (for :meth:`Llama.load_state_dict`)."""
    out = {(k[len("model."):] if k.startswith("model.") else k): v for k, v in state.items()}
    if "lm_head.weight" not in out:
        out["lm_head.weight"] = out["embed_tokens.weight"]
    return out


def hf_config(spec: LlamaSpec) -> dict[str, Any]:
    """The ``LlamaConfig`` keyword arguments for the same model (config.json's content)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.d_model,
        "intermediate_size": spec.d_ff,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_positions,
        "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_theta},
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": spec.dropout,
        "tie_word_embeddings": spec.tie_embeddings,
        "pad_token_id": spec.pad_token_id,
        "bos_token_id": spec.bos_token_id,
        "eos_token_id": spec.eos_token_id,
        "torch_dtype": "float32",
        "use_cache": True,
    }
