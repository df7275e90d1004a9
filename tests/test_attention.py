"""Chapter "Attention: a lookup that is learned": hand arithmetic, PyTorch's
fused scaled_dot_product_attention as the oracle, and a mutation check."""
import math

import pytest
import torch
import torch.nn.functional as F

import literate  # tools/, put on sys.path by the root conftest.py
from transformer import attention, causal_mask


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def test_hand_computed_example():
    """The chapter's worked example: 3 tokens, d = 4, one head, W = I."""
    x = torch.tensor([[2.0, 2, 0, 0], [1, 1, 0, 0], [0, 0, 2, 0]])  # (T, D)
    q = k = v = x.view(1, 1, 3, 4)  # (B, H, T, Dh)
    out, w = attention(q, k, v, causal_mask(3))
    e = math.e
    expected_w = torch.tensor([
        [1.0, 0.0, 0.0],
        [1 / (1 + 1 / e), (1 / e) / (1 + 1 / e), 0.0],
        [1 / (2 + e**2), 1 / (2 + e**2), e**2 / (2 + e**2)]])
    torch.testing.assert_close(w[0, 0], expected_w, rtol=0, atol=1e-6)
    expected_out = expected_w @ x  # (T, D): o_i = sum_j A_ij v_j
    torch.testing.assert_close(out[0, 0], expected_out, rtol=0, atol=1e-6)
    # the rounded numbers quoted in the prose
    assert round(w[0, 0, 1, 0].item(), 3) == 0.731
    assert round(w[0, 0, 2, 2].item(), 3) == 0.787


def _rows_sum_to_one(attn_fn, seed=0):
    """Property 3 as a predicate, so the mutation check can reuse it."""
    B, H, T, S, Dh = 3, 4, 6, 9, 8
    q = rand(B, H, T, Dh, seed=seed)
    k = rand(B, H, S, Dh, seed=seed + 1)
    v = rand(B, H, S, Dh, seed=seed + 2)
    masks = [None, causal_mask(T, S),
             rand(B, 1, T, S, seed=seed + 3) > 0.3]
    for mask in masks:
        if mask is not None:
            mask = mask | causal_mask(T, S)  # keep every row non-empty
        _, w = attn_fn(q, k, v, mask if mask is not None
                       else torch.ones(T, S, dtype=torch.bool))
        if not torch.allclose(w.sum(-1), torch.ones(B, H, T), rtol=0,
                              atol=1e-5):
            return False
    return True


@pytest.mark.parametrize("seed", range(5))
def test_rows_sum_to_one(seed):
    assert _rows_sum_to_one(attention, seed)
    # and explicitly, every batch element, head and position, with scale
    q = rand(2, 3, 7, 16, seed=seed) * 10
    _, w = attention(q, q, q, causal_mask(7))
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 7), rtol=0,
                               atol=1e-5)
    assert (w >= 0).all()


@pytest.mark.parametrize("T,S", [(1, 1), (5, 5), (3, 8), (1, 12), (16, 16)])
@pytest.mark.parametrize("seed", range(3))
def test_matches_sdpa(T, S, seed):
    B, H, Dh = 2, 3, 16
    q = rand(B, H, T, Dh, seed=seed)
    k = rand(B, H, S, Dh, seed=seed + 10)
    v = rand(B, H, S, Dh, seed=seed + 20)
    ours, _ = attention(q, k, v)
    torch.testing.assert_close(
        ours, F.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-6)
    mask = causal_mask(T, S)  # (T, S)
    ours, _ = attention(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    if T == S:
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    # an arbitrary per-batch, per-head mask (every row keeps its diagonal)
    mask = (rand(B, H, T, S, seed=seed + 30) > 0) | causal_mask(T, S)
    ours, _ = attention(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    # a different scale
    ours, _ = attention(q, k, v, scale=0.3)
    theirs = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


# The bug the chapter warns about (zero the weights after the softmax), as
# the training chapter defines it for its failure tests: one copy in the book.
attention_mask_after_softmax = literate.chapter_definition(
    "09_training", "attention_mask_after_softmax")


def _no_future_leak(attn_fn, seed=0):
    B, H, T, Dh = 2, 2, 6, 8
    q, k, v = (rand(B, H, T, Dh, seed=seed + i) for i in range(3))
    out, _ = attn_fn(q, k, v, causal_mask(T))
    for t in range(T - 1):
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t + 1:] += 1.0
        v2[:, :, t + 1:] -= 1.0
        out2, _ = attn_fn(q, k2, v2, causal_mask(T))
        if not torch.equal(out[:, :, :t + 1], out2[:, :, :t + 1]):
            return False
    return True


def test_mask_after_softmax_is_caught():
    assert _rows_sum_to_one(attention)
    assert _no_future_leak(attention)
    assert not _rows_sum_to_one(attention_mask_after_softmax)
    assert not _no_future_leak(attention_mask_after_softmax)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shapes_and_dtypes(dtype):
    B, H, T, S, Dh, Dv = 2, 3, 4, 7, 8, 5
    q = rand(B, H, T, Dh, dtype=dtype)
    k = rand(B, H, S, Dh, dtype=dtype)
    v = rand(B, H, S, Dv, dtype=dtype)
    out, w = attention(q, k, v, causal_mask(T, S))
    assert out.shape == (B, H, T, Dv) and out.dtype == dtype
    assert w.shape == (B, H, T, S) and w.dtype == dtype
    for mask in (causal_mask(T, S), causal_mask(T, S).view(1, 1, T, S),
                 torch.ones(B, 1, 1, S, dtype=torch.bool)):
        out2, _ = attention(q, k, v, mask)
        assert out2.shape == (B, H, T, Dv)


def test_causal_mask():
    assert torch.equal(causal_mask(4), torch.tril(torch.ones(4, 4)).bool())
    m = causal_mask(2, 5)
    assert torch.equal(m, torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]],
                                       dtype=torch.bool))
    assert causal_mask(1, 9).all()
    with pytest.raises(ValueError, match="S"):
        causal_mask(5, 3)
    with pytest.raises(ValueError, match="T"):
        causal_mask(0)


def test_bad_input():
    x = rand(1, 2, 3, 4)
    with pytest.raises(ValueError, match="q"):
        attention(x[0], x, x)
    with pytest.raises(ValueError, match="k"):
        attention(x, x[..., :2], x)
    with pytest.raises(ValueError, match="v"):
        attention(x, x, x[:, :, :2])
    with pytest.raises(ValueError, match="k"):
        attention(x, x.double(), x)
    with pytest.raises(ValueError, match="mask"):
        attention(x, x, x, mask=causal_mask(3).int())
    with pytest.raises(ValueError, match="mask"):
        attention(x, x, x, mask=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        attention(x, x, x, mask=torch.zeros(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="q"):
        attention(x.long(), x.long(), x.long())
