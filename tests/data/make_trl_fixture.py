"""Produce a real TRL GRPOTrainer log (trainer_state.json + TensorBoard events) offline: a tiny
Llama built from a config, a word-level tokenizer built in memory, a toy reward function.
Run in a throwaway venv with `pip install torch==2.13.0 trl tensorboard`:
    HF_HUB_OFFLINE=1 python make_trl_fixture.py OUT_DIR
"""
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def tiny_model(model_dir: str) -> PreTrainedTokenizerFast:
    """A one-layer Llama and its word-level tokenizer (digits, "copy", ":"), saved under model_dir."""
    torch.manual_seed(0)
    words = ["<pad>", "<eos>", "<unk>"] + [str(d) for d in range(10)] + ["copy", ":"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=1))
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return tokenizer


def digits(completions, **kwargs):
    """Share of digit tokens in the completion."""
    return [sum(t.isdigit() for t in c.split()) / max(len(c.split()), 1) for c in completions]


def short(completions, **kwargs):
    return [1.0 if len(c.split()) <= 4 else 0.0 for c in completions]


if __name__ == "__main__":
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    out = sys.argv[1]
    tokenizer = tiny_model(f"{out}-model")
    prompts = [f"copy : {' '.join(str((i * 7 + j) % 10) for j in range(3))}" for i in range(64)]
    args = GRPOConfig(output_dir=out, per_device_train_batch_size=4, num_generations=4, max_completion_length=6,
                      max_steps=6, logging_steps=1, num_iterations=2, beta=0.04, learning_rate=1e-3, save_steps=6,
                      report_to=["tensorboard"], use_cpu=True, bf16=False, seed=0, save_only_model=True)
    GRPOTrainer(model=f"{out}-model", reward_funcs=[digits, short], args=args,
                train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer).train()
