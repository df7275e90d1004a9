"""Chapter "The cost model": Hugging Face's GPT-2 and PyTorch's FLOP counter
are the oracles (random configs, nothing downloaded)."""
import dataclasses
import types

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging as hf_logging

from transformer.cost_model import (GPT2_SMALL, activation_bytes,
                                    attention_flop_share,
                                    attention_timing_parts, cost_table,
                                    flop_crossover_length, forward_flops,
                                    kv_cache_bytes, kv_crossover_length,
                                    model_shape, param_breakdown,
                                    param_count, score_matrix_bytes)

from transformer.model import GPTConfig

hf_logging.set_verbosity_error()

SHAPES = [
    GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=4),
    GPTConfig(vocab_size=97, block_size=64, n_layer=3, n_head=4, n_embd=32,
              ffn_mult=3, tie_weights=False),
    GPTConfig(vocab_size=257, block_size=32, n_layer=2, n_head=1,
              n_embd=24, ffn_mult=2.5),
    GPTConfig(vocab_size=64, block_size=16, n_layer=4, n_head=8, n_embd=64,
              tie_weights=False),
]


def hf_model(s: GPTConfig):
    cfg = GPT2Config(vocab_size=s.vocab_size, n_positions=s.block_size,
                     n_embd=s.n_embd, n_layer=s.n_layer, n_head=s.n_head,
                     n_inner=s.ffn_dim,
                     tie_word_embeddings=s.tie_weights)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("s", SHAPES)
def test_params_match_hf(s):
    m = hf_model(s)
    assert param_count(s) == sum(p.numel() for p in m.parameters())
    b = param_breakdown(s)
    assert b["token_embedding"] == m.transformer.wte.weight.numel()
    assert b["position_embedding"] == m.transformer.wpe.weight.numel()
    assert b["per_layer"] == sum(p.numel()
                                 for p in m.transformer.h[0].parameters())


@pytest.mark.parametrize("s", SHAPES)
def test_params_without_bias(s):
    # bias=False removes every bias vector (linear layers and norms)
    m = hf_model(s)
    weights_only = sum(p.numel() for n, p in m.named_parameters()
                       if not n.endswith(".bias"))
    nb = dataclasses.replace(s, bias=False)
    assert param_count(nb) == weights_only
    rms = dataclasses.replace(s, norm="rmsnorm")
    assert param_count(rms) == param_count(nb) + (
        param_count(s) - param_count(nb)) - (2 * s.n_layer + 1) * s.n_embd


@pytest.mark.parametrize("s", SHAPES)
@pytest.mark.parametrize("B, T", [(1, 1), (1, 5), (3, 8)])
def test_flops_match_flop_counter(s, B, T):
    m = hf_model(s)
    ids = torch.zeros(B, T, dtype=torch.long)  # (B, T)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        m(ids)
    f = forward_flops(T, B, s)
    assert f["total"] == counter.get_total_flops()
    assert f["lm_head"] == counter.get_flop_counts()["GPT2LMHeadModel"][
        torch.ops.aten.mm]


def test_gpt2_small_reference_points():
    assert param_count(GPT2_SMALL) == 124_439_808
    share = attention_flop_share(1024, GPT2_SMALL)
    assert share == pytest.approx(1024 / (6 * 768 + 1024), abs=1e-15)
    assert round(100 * share) == 18
    assert flop_crossover_length(GPT2_SMALL) == 6 * 768
    assert attention_flop_share(4096, GPT2_SMALL) < 0.5 < \
        attention_flop_share(8192, GPT2_SMALL)
    assert round(score_matrix_bytes(8192, 1, 12) / 1e9, 1) == 3.2
    assert kv_cache_bytes(1024, 1, GPT2_SMALL) == 2 * 12 * 1024 * 768 * 4


def test_kv_cache_bytes_match_hf_cache():
    s = SHAPES[3]
    m = hf_model(s)
    B, T = 2, 11
    with torch.no_grad():
        cache = m(torch.zeros(B, T, dtype=torch.long),
                  use_cache=True).past_key_values
    got = sum(layer.keys.numel() * layer.keys.element_size()
              + layer.values.numel() * layer.values.element_size()
              for layer in cache.layers)
    assert got == kv_cache_bytes(T, B, s)


@pytest.mark.parametrize("s", SHAPES + [GPT2_SMALL])
def test_crossovers(s):
    t = flop_crossover_length(s)
    assert t == 2 * s.n_embd + s.ffn_dim
    assert attention_flop_share(int(t), s) == pytest.approx(0.5, abs=1e-12)
    th = flop_crossover_length(s, include_head=True)
    f = forward_flops(1, 1, s)  # linear parts per token
    lin = f["layers"] - f["attention_quadratic"] + f["lm_head"]
    assert 4 * s.n_layer * th * s.n_embd == pytest.approx(lin, rel=1e-12)
    for B in (1, 4):
        tk = kv_crossover_length(s, B=B)
        assert tk * 2 * s.n_layer * B * s.n_embd * 4 == pytest.approx(
            param_count(s) * 4, rel=1e-12)


def test_memory_scaling():
    s = SHAPES[1]
    a1, a2 = (activation_bytes(T, 2, s)["per_layer"] for T in (8, 16))
    lin = 2 * 8 * (8 * s.n_embd + 2 * s.ffn_dim) * 4
    quad = 2 * s.n_head * 8 * 8 * 4
    assert a1 == lin + quad and a2 == 2 * lin + 4 * quad
    assert activation_bytes(8, 2, s)["total"] == s.n_layer * a1
    assert score_matrix_bytes(10, 3, 4, bytes_per=2) == 3 * 4 * 100 * 2
    rows = cost_table(s, contexts=(4, 8), B=2)
    assert [r["kv_bytes"] for r in rows] == [kv_cache_bytes(T, 2, s)
                                             for T in (4, 8)]


def test_model_shape_from_config():
    cfg = types.SimpleNamespace(vocab_size=50, block_size=16, n_layer=2,
                                n_head=2, n_embd=8, ffn_mult=4, bias=False,
                                tie_weights=True, dropout=0.1)
    s = model_shape(cfg)
    assert s == GPTConfig(50, 16, 2, 2, 8, bias=False, dropout=0.1)
    assert param_count(cfg) == param_count(s)
    rope = types.SimpleNamespace(**vars(cfg), pos_encoding="rope")
    assert param_breakdown(rope)["position_embedding"] == 0
    assert model_shape({"vocab_size": 5, "block_size": 4, "n_layer": 1,
                        "n_head": 1, "n_embd": 2}).ffn_dim == 8
    assert model_shape(cfg, n_layer=5).n_layer == 5


@pytest.mark.parametrize("call, arg", [
    (lambda: GPTConfig(10, 8, 1, 3, 8), "n_head"),
    (lambda: GPTConfig(10, 8, 0, 1, 8), "n_layer"),
    (lambda: GPTConfig(10, 8, 1, 1, 8, ffn_mult=0.3), "ffn_mult"),
    (lambda: GPTConfig(10, 8, 1, 1, 8, norm="batch"), "norm"),
    (lambda: model_shape({"vocab_size": 5}), "config"),
    (lambda: model_shape(GPT2_SMALL, n_layers=3), "config"),
    (lambda: forward_flops(0, 1, GPT2_SMALL), "T"),
    (lambda: kv_cache_bytes(8, 0, GPT2_SMALL), "B"),
    (lambda: score_matrix_bytes(8, 1, 12, bytes_per=3), "bytes_per"),
    (lambda: cost_table(GPT2_SMALL, contexts=()), "contexts"),
])
def test_bad_input(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


def test_timing_parts_compose():
    parts = attention_timing_parts(12, n_embd=16, n_head=4, seed=3)
    out = parts["block"]()
    assert out.shape == (1, 12, 16)
    assert parts["quadratic"]().shape == (1, 4, 12, 4)
    # the linear part on the precomputed attention output is the block
    torch.testing.assert_close(parts["linear"](), out, rtol=0, atol=1e-6)


def test_timing_parts_time_the_models_block():
    """The parts are the model's own block (chapter 06's `Block`, default
    kernels), not a re-implementation: built with the same seed, the block's
    forward is the timed 'block', and the timed quadratic part equals
    PyTorch's fused causal attention on that block's queries, keys and
    values (an oracle nobody here wrote)."""
    from transformer.model import Block
    T, D, H, seed = 40, 32, 4, 7
    parts = attention_timing_parts(T, n_embd=D, n_head=H, seed=seed)
    torch.manual_seed(seed)
    block = Block(GPTConfig(vocab_size=1, block_size=T, n_layer=1,
                            n_head=H, n_embd=D)).eval()
    assert block.attn.fused  # the default model's kernel is what is timed
    x = torch.randn(1, T, D, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(parts["block"](), block(x), rtol=0,
                                   atol=0)
        q, k, v = block.attn.qkv(block.ln_1(x))
        want = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True)
    torch.testing.assert_close(parts["quadratic"](), want, rtol=0,
                               atol=1e-6)
    # the caller's global generator is left as it was
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    attention_timing_parts(8, n_embd=16, n_head=2, seed=1)
    torch.testing.assert_close(torch.rand(3), before, rtol=0, atol=0)
