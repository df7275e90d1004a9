"""Tests for transformer.diagnostics (chapter "The GPT", section "Two
diagnostics"): the gradient norm per block, and attention entropy."""
import math

import torch

from transformer.diagnostics import attention_entropy, block_grad_norms
from transformer.model import GPT, GPTConfig


def test_block_grad_norms_equal_autograd_per_block():
    cfg = GPTConfig(vocab_size=1024, block_size=16, n_layer=3, n_head=2,
                    n_embd=16, norm_position="post")
    torch.manual_seed(0)
    model = GPT(cfg)
    g = torch.Generator().manual_seed(7)
    x, y = torch.randint(0, 1024, (2, 4, 16), generator=g)  # (B, T) each
    norms = block_grad_norms(model, x, y)
    assert len(norms) == 3 and all(n > 0 for n in norms)
    assert all(p.grad is None for p in model.parameters())
    _, loss = model(x, y)
    grads = torch.autograd.grad(loss, list(model.blocks[1].parameters()))
    direct = torch.sqrt(sum(gr.pow(2).sum() for gr in grads)).item()
    assert math.isclose(norms[1], direct, rel_tol=1e-5, abs_tol=0)


def test_attention_entropy_is_uniform_for_zero_queries_and_keys():
    """With W_Q = W_K = 0 every score is 0, so each row is uniform over
    its visible keys: entropy ln(i + 1) at query i, averaged; random
    weights give less."""
    cfg = GPTConfig(vocab_size=50, block_size=12, n_layer=2, n_head=2,
                    n_embd=8)
    torch.manual_seed(0)
    model = GPT(cfg)
    x = torch.randint(0, 50, (4, 12))  # (B, T)
    want = sum(math.log(i + 1) for i in range(12)) / 12
    with torch.no_grad():
        for block in model.blocks:
            block.attn.c_attn.weight[:, :16].normal_(0, 3.0)
    assert all(e < want - 0.05 for e in attention_entropy(model, x))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.c_attn.weight[:, :16].zero_()  # W_Q | W_K columns
            block.attn.c_attn.bias[:16].zero_()
    ent = attention_entropy(model, x)
    assert len(ent) == 2
    for e in ent:
        assert math.isclose(e, want, rel_tol=0, abs_tol=1e-6)


def test_attention_entropy_sees_the_heads_and_positions_the_model_runs():
    """Against the attention weights recomputed here, block by block: the
    layer's queries and keys (RoPE in the 'halves' layout, two key/value
    heads for four query heads, query head h reading key head h // 2, keys
    repeated per group) scored by torch's softmax. A re-implementation that
    splits c_attn as if every projection were D wide, or rotates in the
    default layout, fails here."""
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4,
                    n_embd=32, n_kv_head=2, pos_encoding="rope",
                    rope_layout="halves")
    torch.manual_seed(0)
    model = GPT(cfg)
    with torch.no_grad():  # sharp enough that a wrong rotation shows
        for block in model.blocks:
            block.attn.c_attn.weight.mul_(8.0)
    x = torch.randint(0, 64, (3, 16), generator=torch.Generator()
                      .manual_seed(1))  # (B, T)
    want, h = [], model.wte(x) + 0.0  # rope: no position table
    with torch.no_grad():
        for block in model.blocks:
            a = block.ln_1(h)
            q, k, _ = block.attn.qkv(a)  # (B, 4, T, Dh), (B, 2, T, Dh)
            k = k.repeat_interleave(2, dim=1)  # head h reads key head h//2
            s = q @ k.transpose(-2, -1) * block.attn.scale  # (B, H, T, T)
            s = s.masked_fill(~torch.ones(16, 16).tril().bool(),
                              float("-inf"))
            w = torch.softmax(s, dim=-1)
            ent = -(w * torch.log(w.clamp_min(1e-30))).sum(-1)
            want.append(ent.mean().item())
            h = block(h)
    got = attention_entropy(model, x)
    assert all(math.isclose(g, w, rel_tol=0, abs_tol=1e-5)
               for g, w in zip(got, want)), (got, want)
