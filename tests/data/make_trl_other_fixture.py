"""Produce real logs of TRL trainers other than GRPOTrainer (SFTTrainer, DPOTrainer) offline, to test that
the diagnosis refuses them instead of reading them as GRPO logs without their clipping metrics: a tiny
Llama built from a config, a word-level tokenizer built in memory, a toy dataset.
Run with trl installed (`pip install -e '.[trl]'` or a throwaway venv), `HF_HUB_OFFLINE=1`:
    HF_HUB_OFFLINE=1 python make_trl_other_fixture.py OUT_DIR
It writes OUT_DIR/sft/checkpoint-6/trainer_state.json and OUT_DIR/dpo/checkpoint-6/trainer_state.json.
"""
import sys

from datasets import Dataset
from make_trl_fixture import tiny_model  # the same model and tokenizer as the GRPO fixture (this directory)
from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

out = sys.argv[1]
tokenizer = tiny_model(f"{out}/model")
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
