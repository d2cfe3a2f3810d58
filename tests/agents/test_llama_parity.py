"""The native transformer is Hugging Face's LlamaForCausalLM: the same weights give the same logits,
and the exported checkpoint and tokenizer load offline (skipped without the [trl] extra)."""

from __future__ import annotations

import pytest
import torch

from harness.agents.llama import Llama, LlamaSpec, hf_config, hf_state_dict, real_positions

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def left_padded_batch(vocab: int = 15) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(3, vocab, (5, 12))
    mask = torch.ones(5, 12, dtype=torch.bool)
    mask[1, :3] = mask[2, :6] = mask[4, :1] = False        # left padding
    mask[3, 9:] = False                                     # positions after a completion's EOS
    return ids.masked_fill(~mask, 0), mask


def hf_twin(model: Llama):
    config = {k: v for k, v in hf_config(model.spec).items() if k not in ("architectures", "model_type", "torch_dtype")}
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    return hf


@pytest.mark.parametrize("tie", [False, True])
def test_native_logits_equal_llama_for_causal_lm(tie):
    model = Llama(LlamaSpec(vocab_size=15, n_layers=3, d_model=64, n_heads=4, d_ff=96, tie_embeddings=tie)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)                # far from the init, so a wrong mapping cannot hide
    hf = hf_twin(model)
    ids, mask = left_padded_batch()
    positions = real_positions(mask)
    with torch.no_grad():
        native = model(ids, mask, positions)
        theirs = hf(input_ids=ids, attention_mask=mask.long(), position_ids=positions).logits
        default_positions = hf(input_ids=ids, attention_mask=mask.long()).logits   # 0..S-1, as TRL calls it
    assert (native - theirs)[mask].abs().max() < 1e-5
    # rotary embeddings are relative: an offset in positions changes only rounding
    assert (native - default_positions)[mask].abs().max() < 1e-4


def test_kv_cache_generation_matches_the_full_forward():
    model = Llama(LlamaSpec(vocab_size=15)).eval()
    ids, mask = left_padded_batch()
    positions = real_positions(mask)
    with torch.no_grad():
        full = model(ids, mask, positions)
        cache = model.new_cache(ids.shape[0], ids.shape[1])
        steps = [model(ids[:, :6], mask[:, :6], positions[:, :6], cache)]
        steps += [model(ids[:, t:t + 1], mask[:, :t + 1], positions[:, t:t + 1], cache) for t in range(6, 12)]
    assert (torch.cat(steps, 1) - full)[mask].abs().max() < 1e-5


def test_export_loads_with_from_pretrained_and_the_tokenizer_offline(tmp_path):
    from harness.agents.hf import export_hf
    from harness.envs.toyseq import Vocab

    vocab = Vocab()
    model = Llama(LlamaSpec(vocab_size=vocab.size)).eval()
    out = export_hf(model, tmp_path / "model", vocab.tokens())
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()}
    hf = transformers.LlamaForCausalLM.from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    raw = transformers.PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"))
    assert raw("<s> 3 1 4").input_ids == [1, 8, 6, 9]
    enc = tok(["<s> 3 1 4", "<s> 5"], return_tensors="pt", padding=True)
    assert tok.padding_side == "left" and enc.input_ids[1].tolist() == [0, 0, 1, 10]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (vocab.pad, vocab.bos, vocab.eos)
    assert tok.decode([vocab.open, 8, vocab.close, vocab.eos]) == "<a> 3 </a> </s>"
    mask = enc.attention_mask.bool()
    with torch.no_grad():
        native = model(enc.input_ids, mask)
        theirs = hf(**enc, position_ids=real_positions(mask)).logits
    assert (native - theirs)[mask].abs().max() < 1e-5


def test_export_of_the_warm_up_checkpoint(tmp_path):
    from harness.agents import sft
    from harness.agents.hf import export_hf
    from tests.helpers import make_experiment

    exp = make_experiment(["algo=grpo", "env=toyseq", f"results_dir={tmp_path}", "algo.sft_steps=20"])
    state, meta = sft.load_checkpoint(exp)
    out = export_hf(sft.checkpoint_dir(exp), tmp_path / "hf")
    hf = transformers.LlamaForCausalLM.from_pretrained(out)
    assert hf.config.vocab_size == len(meta["vocab"]) and hf.config.num_hidden_layers == exp.algo.n_layers
    assert torch.equal(hf.model.embed_tokens.weight, state["embed_tokens.weight"])
