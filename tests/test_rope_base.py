"""RoPE's pairings and bases (chapter "RoPE's base and conventions"): the
relative-position property for matched pairings and its failure when mixed, the
permutation that makes the two pairings one model, and Hugging Face's rotary
functions and scaling rules as oracles."""
import pytest
import torch

from transformer.model import GPT, GPTConfig
from transformer.positions import apply_rope
from transformer.rope_scaling import (dynamic_ntk_base, halves_permutation,
                                      mixed_layout, ntk_base, rope_inv_freq,
                                      set_rope_base, to_halves_layout)

LAYOUTS = ("interleaved", "halves")


def scores(lq, lk, shift, seed=0, Dh=16, N=500):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(N, 1, Dh, generator=g) for _ in range(2))
    m, n = (torch.randint(0, 300, (N, 1), generator=g) for _ in range(2))
    return (apply_rope(q, m + shift, layout=lq)
            * apply_rope(k, n + shift, layout=lk)).sum(-1)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shift", [1, 37, 1000])
def test_matched_pairing_depends_only_on_distance(layout, shift):
    torch.testing.assert_close(scores(layout, layout, shift),
                               scores(layout, layout, 0), rtol=0, atol=1e-4)


def test_mixed_pairing_fails_the_shift_test_by_order_one():
    diff = (scores("interleaved", "halves", 37)
            - scores("interleaved", "halves", 0)).abs().max()
    assert diff > 1.0


def test_halves_is_the_interleaved_rotation_after_the_permutation():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 7, 24, generator=g, dtype=torch.float64)
    pos = torch.arange(7)
    P = halves_permutation(24)
    torch.testing.assert_close(apply_rope(x, pos, layout="interleaved")[..., P],
                               apply_rope(x[..., P], pos, layout="halves"),
                               rtol=0, atol=1e-12)


def tiny_rope(seed=0, **kw):
    """A RoPE GPT whose attention is sharp (W_Q, W_K scaled by 20): at the
    default initialisation scores are near zero and positions barely
    matter, which would make any layout look like any other."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=40, block_size=24, n_layer=2, n_head=2,
                          n_embd=32, pos_encoding="rope", **kw)).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.c_attn.weight[:, :64].mul_(20)
    return model


@torch.no_grad()
def test_permuted_halves_model_equals_the_interleaved_model():
    inter = tiny_rope()
    halves = to_halves_layout(inter)
    assert halves.config.rope_layout == "halves"
    idx = torch.randint(0, 40, (2, 24), generator=torch.Generator()
                        .manual_seed(0))
    torch.testing.assert_close(halves(idx)[0], inter(idx)[0], rtol=0,
                               atol=1e-5)
    # without the permutation the same weights are another function
    plain = GPT(halves.config).eval()
    plain.load_state_dict(inter.state_dict())
    assert (plain(idx)[0] - inter(idx)[0]).abs().max() > 1e-2


@torch.no_grad()
def test_mixed_layout_changes_keys_only():
    model = tiny_rope()
    idx = torch.randint(0, 40, (1, 24))
    before = model(idx)[0]
    mixed_layout(model)
    attn = model.blocks[0].attn
    assert (attn.rope_layout_q, attn.rope_layout_k) == ("interleaved",
                                                        "halves")
    assert (model(idx)[0] - before).abs().max() > 1e-3


def test_halves_layout_equals_hugging_face_rotary():
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    g = torch.Generator().manual_seed(2)
    B, H, T, Dh, base = 2, 3, 11, 16, 10000.0
    q = torch.randn(B, H, T, Dh, generator=g)
    k = torch.randn(B, H, T, Dh, generator=g)
    pos = torch.arange(T)
    freqs = pos[:, None].double() * rope_inv_freq(base, Dh)  # (T, Dh/2)
    emb = torch.cat([freqs, freqs], -1)  # (T, Dh): HF duplicates
    cos, sin = emb.cos().float()[None], emb.sin().float()[None]  # (1, T, Dh)
    hq, hk = llama.apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(apply_rope(q, pos, base, "halves"), hq,
                               rtol=0, atol=1e-5)
    torch.testing.assert_close(apply_rope(k, pos, base, "halves"), hk,
                               rtol=0, atol=1e-5)


def hf_config(factor, kind):
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=64, num_attention_heads=4,
                       max_position_embeddings=128, rope_theta=10000.0,
                       rope_scaling={"rope_type": kind, "factor": factor})


@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_linear_interpolation_equals_hugging_face(factor):
    rope = pytest.importorskip("transformers.modeling_rope_utils")
    hf, _ = rope._compute_linear_scaling_rope_parameters(
        hf_config(factor, "linear"), "cpu")
    torch.testing.assert_close(rope_inv_freq(1e4, 16, factor).float(), hf,
                               rtol=1e-6, atol=0)


@pytest.mark.parametrize("seq_len", [64, 128, 300, 512])
def test_dynamic_ntk_equals_hugging_face(seq_len):
    rope = pytest.importorskip("transformers.modeling_rope_utils")
    hf, _ = rope._compute_dynamic_ntk_parameters(
        hf_config(4.0, "dynamic"), "cpu", seq_len=seq_len)
    ours = rope_inv_freq(dynamic_ntk_base(1e4, 4.0, 16, seq_len, 128), 16)
    torch.testing.assert_close(ours.float(), hf, rtol=1e-5, atol=0)


def test_ntk_base_interpolates_the_slowest_pair_and_keeps_the_fastest():
    Dh, s = 24, 4.0
    before, after = rope_inv_freq(1e4, Dh), rope_inv_freq(ntk_base(1e4, s, Dh),
                                                         Dh)
    torch.testing.assert_close(after[0], before[0], rtol=0, atol=0)
    torch.testing.assert_close(after[-1], before[-1] / s, rtol=1e-12, atol=0)


def test_set_rope_base_changes_every_block():
    model = set_rope_base(tiny_rope(), 123.0)
    assert {b.attn.rope_base for b in model.blocks} == {123.0}


@pytest.mark.parametrize("call, message", [
    (lambda: apply_rope(torch.zeros(1, 2, 4), torch.arange(2),
                        layout="neox"), "layout: expected one of"),
    (lambda: GPTConfig(vocab_size=5, block_size=4, n_layer=1, n_head=1,
                       n_embd=4, rope_layout="halfs"),
     "rope_layout: expected one of"),
    (lambda: ntk_base(0, 2, 16), "base: expected a finite number > 0"),
    (lambda: ntk_base(1e4, float("inf"), 16), "factor"),
    (lambda: halves_permutation(7), "Dh: expected an even int"),
    (lambda: to_halves_layout(GPT(GPTConfig(vocab_size=5, block_size=4,
                                            n_layer=1, n_head=1,
                                            n_embd=4))),
     "model: expected an interleaved-RoPE GPT"),
])
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
