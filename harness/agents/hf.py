"""The GRPO transformer as a Hugging Face user has it: ``LlamaForCausalLM`` weights, a config and a
tokenizer, built offline (``HF_HUB_OFFLINE=1``; nothing touches the Hub).

- :func:`build_tokenizer` makes a ``tokenizers`` WordLevel model over the task vocabulary
  (``<pad> <s> </s> <a> </a> 0 1 ...``; whitespace-separated, so ``"<s> 3 1 4"`` encodes to
  ``[1, 8, 6, 9]``) with pad / bos / eos set, wrapped as a ``PreTrainedTokenizerFast`` that pads
  on the left. It adds no special tokens by itself: prompts carry their ``<s>``.
- :func:`export_hf` writes a checkpoint (the cached supervised warm-up, see
  harness/agents/sft.py, or any state of the native model) as a directory that
  ``LlamaForCausalLM.from_pretrained(out_dir)`` and ``AutoTokenizer.from_pretrained(out_dir)``
  load: config.json, model.safetensors, generation_config.json, tokenizer.json,
  tokenizer_config.json.

Needs the ``[trl]`` extra (transformers, tokenizers); without it each function ends with one line
saying so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from harness.agents.llama import Llama, LlamaSpec, hf_config, hf_state_dict
from harness.config import ConfigError
from harness.envs.toyseq import SPECIAL_TOKENS, Vocab

EXTRA = "the Hugging Face export needs the [trl] extra: pip install -e '.[trl]'"


def _require() -> None:
    try:
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise ConfigError(EXTRA) from None


def build_tokenizer(tokens: list[str], out_dir: str | Path | None = None) -> Any:
    """A ``PreTrainedTokenizerFast`` over ``tokens`` (ids in list order; the first three are
    pad, bos, eos). With ``out_dir``, also saves it there (tokenizer.json and its config), so
    ``PreTrainedTokenizerFast(tokenizer_file=out_dir / "tokenizer.json")`` and
    ``AutoTokenizer.from_pretrained(out_dir)`` load it offline."""
    _require()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pad, bos, eos = SPECIAL_TOKENS[:3]
    model = models.WordLevel(vocab={t: i for i, t in enumerate(tokens)}, unk_token=pad)
    raw = Tokenizer(model)
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.decoder = decoders.WordPiece(prefix="##", cleanup=False)   # joins tokens with spaces
    raw.add_special_tokens([pad, bos, eos])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token=pad, bos_token=bos, eos_token=eos,
                                  padding_side="left", model_max_length=4096)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        raw.save(str(out / "tokenizer.json"))
        tok.save_pretrained(str(out))
    return tok


def load_native(checkpoint: str | Path) -> tuple[Llama, dict[str, Any]]:
    """The native transformer stored in a warm-up checkpoint directory, and its meta."""
    path = Path(checkpoint)
    meta = json.loads((path / "meta.json").read_text())
    if meta.get("model") != "transformer" or not meta.get("spec"):
        raise ConfigError(f"checkpoint {path.name} holds model={meta.get('model')}: only model=transformer "
                          "has a Hugging Face form")
    model = Llama(LlamaSpec(**meta["spec"]))
    model.load_state_dict(torch.load(path / "model.pt", weights_only=True))
    return model, meta


def export_hf(checkpoint: str | Path | Llama, out_dir: str | Path, tokens: list[str] | None = None) -> Path:
    """Write ``checkpoint`` (a warm-up checkpoint directory, or a native model with ``tokens``) as a
    Hugging Face model directory; returns ``out_dir``."""
    _require()
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    if isinstance(checkpoint, Llama):
        model, vocab = checkpoint, tokens or Vocab(checkpoint.spec.vocab_size - len(SPECIAL_TOKENS)).tokens()
    else:
        model, meta = load_native(checkpoint)
        vocab = meta["vocab"]
    spec = model.spec
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in hf_config(spec).items() if k not in ("architectures", "model_type", "torch_dtype")}
    hf = LlamaForCausalLM(LlamaConfig(**config))
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    if unexpected or [m for m in missing if not (spec.tie_embeddings and m == "lm_head.weight")]:
        raise ConfigError(f"the native model does not map onto LlamaForCausalLM (missing {missing}, "
                          f"unexpected {unexpected})")
    if spec.tie_embeddings:
        hf.tie_weights()
    hf.generation_config = GenerationConfig(bos_token_id=spec.bos_token_id, eos_token_id=spec.eos_token_id,
                                            pad_token_id=spec.pad_token_id)
    hf.save_pretrained(str(out))
    build_tokenizer(vocab, out)
    return out


def trl_grpo_args(cfg: Any) -> dict[str, Any]:
    """TRL ``GRPOConfig`` keyword arguments for the same GRPO as the native ``cfg`` (GRPOConfig):
    one generation of ``n_prompts * group_size`` completions per update, split into
    ``n_minibatches`` optimizer steps, reused ``num_iterations`` times. CPU-safe values are set
    explicitly where TRL's defaults differ (bf16, gradient checkpointing, lr schedule, loss type)."""
    per_step = cfg.batch_size // cfg.n_minibatches
    return {
        "per_device_train_batch_size": per_step,
        "steps_per_generation": cfg.n_minibatches,
        "gradient_accumulation_steps": 1,
        "num_generations": cfg.group_size,
        "num_iterations": cfg.num_iterations,
        "learning_rate": cfg.lr,
        # the native schedule steps once per update: n_minibatches x num_iterations optimizer steps in TRL
        "lr_scheduler_type": ("constant_with_warmup" if cfg.lr_decay == "constant" and cfg.warmup_updates
                              else cfg.lr_decay),
        "warmup_steps": cfg.warmup_updates * cfg.n_minibatches * cfg.num_iterations,
        "weight_decay": 0.0,
        "max_grad_norm": cfg.max_grad_norm,
        "epsilon": cfg.clip_range,
        "beta": cfg.beta,
        "use_bias_correction_kl": cfg.kl_is_weight,
        "scale_rewards": cfg.scale,
        # token_mean over a minibatch's tokens is TRL's bnpo; seq_mean (per completion, then mean) is grpo
        "loss_type": "bnpo" if cfg.loss_agg == "token_mean" else "grpo",
        "max_completion_length": cfg.max_new_tokens,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "top_k": cfg.top_k,
        "mask_truncated_completions": False,
        "disable_dropout": True,
        "bf16": False,
        "activation_checkpointing": False,   # transformers 5 name of gradient_checkpointing (TRL default True)
        "use_cpu": True,
        "report_to": [],
    }
