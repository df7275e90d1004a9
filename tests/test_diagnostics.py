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
