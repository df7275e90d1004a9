"""Chapter "Multi-head attention, the block and the GPT model", section
"Saving for Hugging Face": a folder written by save_hf_gpt2 loads in
`transformers` with the same logits; configurations GPT-2 cannot express
are refused by name."""
import dataclasses
import json

import pytest
import torch
from transformers import GPT2LMHeadModel

from transformer import GPT, GPTConfig
from transformer.hf_files import hf_gpt2_config, save_hf_gpt2

BASE = dict(vocab_size=97, block_size=24, n_layer=2, n_head=4, n_embd=32)
CONFIGS = [
    {},
    dict(tie_weights=False),
    dict(bias=False, ffn_mult=2),
    dict(norm_eps=1e-6, n_layer=3, n_head=2),
    dict(bias=False, tie_weights=False, ffn_mult=1.5, dropout=0.1),
]


def perturbed(config, seed=0):
    """A model whose every parameter is off its initial value (biases and
    norm gains included), so a copying mistake cannot hide."""
    torch.manual_seed(seed)
    model = GPT(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("extra", CONFIGS)
def test_saved_folder_loads_with_same_logits(tmp_path, extra):
    config = GPTConfig(**{**BASE, **extra})
    ours = perturbed(config)
    save_hf_gpt2(ours, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())[
        "model_type"] == "gpt2"
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    idx = torch.randint(0, config.vocab_size, (3, config.block_size),
                        generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(theirs(idx).logits, ours(idx)[0],
                                   rtol=0, atol=1e-5)
    tied = theirs.lm_head.weight is theirs.transformer.wte.weight
    assert tied == config.tie_weights
    # and back: from_hf_gpt2 of the loaded folder is the same function
    again = GPT.from_hf_gpt2(theirs).eval()
    with torch.no_grad():
        torch.testing.assert_close(again(idx)[0], ours(idx)[0],
                                   rtol=0, atol=1e-5)


def test_bfloat16_weights_keep_their_bits(tmp_path):
    ours = perturbed(GPTConfig(**BASE)).to(torch.bfloat16)
    save_hf_gpt2(ours, tmp_path)
    theirs = GPT2LMHeadModel.from_pretrained(tmp_path,
                                             torch_dtype=torch.bfloat16)
    assert torch.equal(theirs.transformer.h[1].mlp.c_fc.weight,
                       ours.blocks[1].mlp.c_fc.weight)


@pytest.mark.parametrize("field, value", [
    ("pos_encoding", "rope"), ("pos_encoding", "sinusoidal"),
    ("pos_encoding", "none"), ("norm", "rmsnorm"),
    ("norm_position", "post"), ("attn_scale", False),
])
def test_inexpressible_configs_are_refused_by_name(tmp_path, field, value):
    config = dataclasses.replace(GPTConfig(**BASE), **{field: value})
    with pytest.raises(ValueError, match=f"config.{field}"):
        hf_gpt2_config(config)
    with pytest.raises(ValueError, match=f"config.{field}"):
        save_hf_gpt2(GPT(config), tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before writing


def test_bad_model_argument(tmp_path):
    with pytest.raises(ValueError, match="model"):
        save_hf_gpt2(torch.nn.Linear(2, 2), tmp_path)
