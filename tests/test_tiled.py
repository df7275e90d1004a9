"""Tiled attention with an online softmax (chapter "Tiled attention with an
online softmax"): exact against a float64 reference within
flash-attention's error rule, equal to the book's attention and to
PyTorch's SDPA (an oracle used here only), gradcheck in float64, the saved
bytes of its formula, and tiles above the diagonal skipped."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from transformer.attention import attention, causal_mask
from transformer.tiled import (predicted_tiled_bytes, saved_bytes,
                               tiled_attention)


def reference(q, k, v, causal=True, window=None):
    """Naive masked attention and its log-sum-exp, in q's dtype; a row with
    no visible key gives output 0 and lse -inf (the kernel's convention)."""
    T, S = q.shape[2], k.shape[2]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, S)
    i = torch.arange(T).unsqueeze(1) + S - T
    j = torch.arange(S).unsqueeze(0)
    mask = (j <= i) if causal else torch.ones(T, S, dtype=torch.bool)
    if window is not None:
        mask = mask & (j > i - window)
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)  # (B, H, T)
    p = torch.exp(s - lse.masked_fill(torch.isinf(lse), math.inf)
                  .unsqueeze(-1))
    return p @ v, lse


def qkv(T, S, Dh, dtype=torch.float32, seed=0, B=1, H=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, Dh, generator=g, dtype=dtype)
            for n in (T, S, S)]


def _cases():
    # The parametrisation, T x blocks x causal, Dh cycling through
    # {16, 24, 32} (the full product adds no path: Dh enters only matmul
    # shapes). Block 1 runs up to T = 97: at T = 257 it is 33,000 tiles
    # of Python loop, minutes of CPU for no path that T = 97 misses.
    out, n = [], 0
    for T in (1, 7, 97, 128, 257):
        for block in (1, 16, 64, T, T + 5):
            if block == 1 and T > 97:
                continue
            for causal in (True, False):
                out.append((T, block, causal, (16, 24, 32)[n % 3]))
                n += 1
    return out


CASES = _cases()


def _errors(T, S, block, causal, Dh, seed=0):
    """Max abs error of (out, lse, grads) against float64, for the tiled
    kernel and for the book's float32 attention."""
    q64, k64, v64 = (t.requires_grad_() for t in qkv(T, S, Dh,
                                                     torch.float64, seed))
    ref, ref_lse = reference(q64, k64, v64, causal)
    dout = torch.randn(ref.shape, generator=torch.Generator()
                       .manual_seed(seed + 1), dtype=torch.float64)
    g64 = torch.autograd.grad(ref, (q64, k64, v64), dout)
    q, k, v = (t.detach().float().requires_grad_() for t in (q64, k64, v64))
    out, lse = tiled_attention(q, k, v, causal=causal, block_size=block,
                               return_lse=True)
    g_t = torch.autograd.grad(out, (q, k, v), dout.float())
    mask = causal_mask(T, S) if causal else None
    book = attention(q, k, v, mask)[0]
    g_b = torch.autograd.grad(book, (q, k, v), dout.float())
    # flash-attention's second reference: float32, operations reordered
    # (scale k, not the scores; divide after the value matmul)
    r = q @ (k / math.sqrt(Dh)).transpose(-2, -1)  # (B, H, T, S)
    if causal:
        r = r.masked_fill(~causal_mask(T, S), float("-inf"))
    e = torch.exp(r - r.amax(-1, keepdim=True))
    reord = (e @ v) / e.sum(-1, keepdim=True)
    g_r = torch.autograd.grad(reord, (q, k, v), dout.float())
    s32 = (q @ k.transpose(-2, -1)) / math.sqrt(Dh)
    if causal:
        s32 = s32.masked_fill(~causal_mask(T, S), float("-inf"))
    book_lse = torch.logsumexp(s32, -1)

    def err(a, b):
        return (a.double() - b).abs().max().item()

    def ulp(*refs):  # one float32 rounding at the largest reference value
        return EPS32 * max(r[torch.isfinite(r)].abs().max().item()
                           for r in refs)
    return {"out": (err(out, ref), max(err(book, ref), err(reord, ref)),
                    ulp(ref)),
            "lse": (err(lse, ref_lse), err(book_lse, ref_lse),
                    ulp(ref_lse)),
            "grad": (max(map(err, g_t, g64)),
                     max(*map(err, g_b, g64), *map(err, g_r, g64)),
                     ulp(*g64))}


EPS32 = torch.finfo(torch.float32).eps


def within(e, key, factor):
    """flash-attention's rule, tiled error <= factor x the error of
    float32 attention (the larger of the book's order and flash's
    reordered one), which counts as at least two float32
    roundings of the largest value: below that, its smallness is luck of
    the draw (at T = 1 the book's softmax is exactly 1 and its gradient
    error is a single rounding), not a standard to hold a kernel to."""
    tiled, book, ulp = e[key]
    return tiled <= factor * max(book, 2 * ulp)


@pytest.mark.parametrize("T,block,causal,Dh", CASES)
def test_error_within_flash_attention_rule(T, block, causal, Dh):
    e = _errors(T, T, block, causal, Dh)
    assert within(e, "out", 2) and within(e, "lse", 2), e
    assert within(e, "grad", 3), e


@pytest.mark.parametrize("T,S", [(7, 19), (33, 97), (64, 257), (1, 40)])
@pytest.mark.parametrize("causal", [True, False])
def test_unequal_lengths_bottom_right_aligned(T, S, causal):
    e = _errors(T, S, 16, causal, 24)
    assert within(e, "out", 2) and within(e, "lse", 2), e
    assert within(e, "grad", 3), e


@pytest.mark.parametrize("T,block,causal,Dh", CASES[::3])
def test_equals_book_attention(T, block, causal, Dh):
    q, k, v = qkv(T, T, Dh)
    mask = causal_mask(T) if causal else None
    torch.testing.assert_close(
        tiled_attention(q, k, v, causal=causal, block_size=block),
        attention(q, k, v, mask)[0], rtol=1e-5, atol=1e-6)


def test_more_queries_than_keys_gives_zero_rows():
    q, k, v = (t.requires_grad_() for t in qkv(9, 4, 16))
    out, lse = tiled_attention(q, k, v, block_size=2, return_lse=True)
    assert (out[:, :, :5] == 0).all() and torch.isinf(lse[:, :, :5]).all()
    ref, ref_lse = reference(q, k, v)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
    out.square().sum().backward()
    for t in (q, k, v):
        assert not torch.isnan(t.grad).any()
    assert (q.grad[:, :, :5] == 0).all()


@pytest.mark.parametrize("causal,window", [(True, None), (False, None),
                                           (True, 3)])
def test_gradcheck_float64(causal, window):
    q, k, v = (t.requires_grad_() for t in qkv(6, 6, 4, torch.float64,
                                               B=1, H=1))
    assert torch.autograd.gradcheck(
        lambda a, b, c: tiled_attention(a, b, c, causal=causal,
                                        block_size=2, window=window),
        (q, k, v))
    q, k, v = (t.requires_grad_() for t in qkv(3, 7, 4, torch.float64,
                                               B=1, H=1))
    assert torch.autograd.gradcheck(
        lambda a, b, c: tiled_attention(a, b, c, causal=causal,
                                        block_size=2, window=window),
        (q, k, v))


@pytest.mark.parametrize("T,S,causal", [(64, 64, True), (50, 50, False),
                                        (20, 77, True)])
def test_equals_sdpa(T, S, causal):
    q, k, v = (t.requires_grad_() for t in qkv(T, S, 32))
    out = tiled_attention(q, k, v, causal=causal, block_size=16)
    mask = causal_mask(T, S) if causal else None
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    dout = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), dout),
                    torch.autograd.grad(ref, (q, k, v), dout)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("T,S", [(128, 128), (40, 100)])
def test_saved_bytes_formula(T, S):
    q, k, v = (t.requires_grad_() for t in qkv(T, S, 16, B=2, H=3))
    assert saved_bytes(tiled_attention, q, k, v) == \
        predicted_tiled_bytes(2, 3, T, S, 16)
    # the book's attention keeps T x S tensors: many times more
    book = saved_bytes(lambda a, b, c: attention(
        a, b, c, causal_mask(T, S))[0], q, k, v)
    assert book > 3 * predicted_tiled_bytes(2, 3, T, S, 16)


def test_never_materialises_score_matrix():
    T, block = 256, 32
    q, k, v = (t.requires_grad_() for t in qkv(T, T, 16, B=1, H=1))
    biggest = []

    from torch.utils._python_dispatch import TorchDispatchMode

    class Largest(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(t, torch.Tensor) and t.dim() >= 2:
                    biggest.append(t.shape[-2] * t.shape[-1]
                                   if t.shape[-1] != 16 else 0)
            return out

    with Largest():
        tiled_attention(q, k, v, block_size=block).sum().backward()
    assert max(biggest) <= block * block  # a tile, never T x T
    biggest.clear()
    with Largest():
        attention(q, k, v, causal_mask(T))[0].sum().backward()
    assert max(biggest) == T * T  # the mutation the check must catch


def _matmul_flops(fn):
    with FlopCounterMode(display=False) as c:
        fn().sum().backward()
    return c.get_total_flops()


def test_causal_tiles_are_skipped():
    T, Dh, block = 256, 16, 32
    q, k, v = (t.requires_grad_() for t in qkv(T, T, Dh, B=1, H=1))
    full = _matmul_flops(lambda: tiled_attention(q, k, v, causal=False,
                                                 block_size=block))
    causal = _matmul_flops(lambda: tiled_attention(q, k, v,
                                                   block_size=block))
    untiled = _matmul_flops(lambda: attention(q, k, v)[0])
    n = T // block
    assert full == untiled * 7 // 6  # eq. (eq-tiled-flops), exactly
    assert causal * 2 * n == full * (n + 1)  # n(n+1)/2 of n^2 tiles


@pytest.mark.parametrize("kwargs,field", [
    ({"block_size": 0}, "block_size"), ({"block_size": 2.0}, "block_size"),
    ({"causal": 1}, "causal"), ({"window": 0}, "window"),
    ({"window": 4, "causal": False}, "window"), ({"scale": -1.0}, "scale")])
def test_rejects_bad_arguments(kwargs, field):
    q, k, v = qkv(4, 4, 8)
    with pytest.raises(ValueError, match=f"^{field}:"):
        tiled_attention(q, k, v, **kwargs)


@pytest.mark.parametrize("which,bad,field", [
    ("k", lambda k: k[..., :4], "k"), ("v", lambda v: v[:, :1], "v"),
    ("q", lambda q: q[0], "q"), ("k", lambda k: k.double(), "k")])
def test_rejects_bad_tensors(which, bad, field):
    t = dict(zip("qkv", qkv(4, 4, 8)))
    t[which] = bad(t[which])
    with pytest.raises(ValueError, match=f"^{field}:"):
        tiled_attention(t["q"], t["k"], t["v"])
