"""Produce real logs of TRL trainers other than GRPOTrainer (SFTTrainer, DPOTrainer) offline, to test that
the diagnosis refuses them instead of reading them as GRPO logs without their clipping metrics: a tiny
Llama built from a config, a word-level tokenizer built in memory, a toy dataset.
Run with trl installed (`pip install -e '.[trl]'` or a throwaway venv), `HF_HUB_OFFLINE=1`:
    HF_HUB_OFFLINE=1 python make_trl_other_fixture.py OUT_DIR
It writes OUT_DIR/sft/checkpoint-6/trainer_state.json and OUT_DIR/dpo/checkpoint-6/trainer_state.json.
"""
import sys

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

out = sys.argv[1]
torch.manual_seed(0)
words = ["<pad>", "<eos>", "<unk>"] + [str(d) for d in range(10)] + ["copy", ":"]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
model = LlamaForCausalLM(LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                                     pad_token_id=0, eos_token_id=1, bos_token_id=1))
model.save_pretrained(f"{out}/model")
tokenizer.save_pretrained(f"{out}/model")
digits = [" ".join(str((i * 7 + j) % 10) for j in range(3)) for i in range(64)]
common = dict(per_device_train_batch_size=4, max_steps=6, logging_steps=1, save_steps=6, learning_rate=1e-3,
              report_to=[], use_cpu=True, bf16=False, seed=0, save_only_model=True)

SFTTrainer(model=f"{out}/model", processing_class=tokenizer,
           args=SFTConfig(output_dir=f"{out}/sft", max_length=16, **common),
           train_dataset=Dataset.from_dict({"prompt": [f"copy : {d}" for d in digits], "completion": digits})).train()

DPOTrainer(model=f"{out}/model", processing_class=tokenizer,
           args=DPOConfig(output_dir=f"{out}/dpo", max_length=16, **common),
           train_dataset=Dataset.from_dict({"prompt": [f"copy : {d}" for d in digits], "chosen": digits,
                                            "rejected": [d[::-1] for d in digits]})).train()
