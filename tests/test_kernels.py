"""The hand-written backward passes of chapter "Backward passes by hand":
float64 gradcheck, PyTorch's own implementations as oracles, and the fused
model against the teaching model."""
import dataclasses
import itertools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck

import oracles  # tools/, on sys.path via the root conftest.py

from transformer import (GPT, GPTConfig, causal_attention, cross_entropy_mean,
                         gelu_tanh_fused, layer_norm, make_caches,
                         rms_norm)

F64 = dict(dtype=torch.float64)


def _qkv(B, H, T, S, Dh, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, Dh, generator=g, **F64)
    k = torch.randn(B, H, S, Dh, generator=g, **F64)
    v = torch.randn(B, H, S, Dh + 1, generator=g, **F64)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def _sdpa_causal(q, k, v, scale):
    T, S = q.shape[-2], k.shape[-2]
    keep = torch.ones(T, S, dtype=torch.bool).tril(S - T)  # (T, S)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                          scale=scale)


@pytest.mark.parametrize("T,S,block", [(7, 7, 3), (5, 9, 2), (6, 6, 64),
                                       (1, 5, 4), (8, 8, 1), (4, 4, 4)])
def test_attention_gradcheck(T, S, block):
    q, k, v = _qkv(2, 3, T, S, 4)
    assert gradcheck(lambda q, k, v: causal_attention(q, k, v, 0.7, block),
                     (q, k, v))


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 12), extra=st.integers(0, 5), block=st.integers(1, 8),
       scale=st.floats(0.1, 2.0), seed=st.integers(0, 2**16))
def test_attention_equals_sdpa(T, extra, block, scale, seed):
    q, k, v = _qkv(2, 2, T, T + extra, 3, seed)
    ours = causal_attention(q, k, v, scale, block)  # (B, H, T, Dv)
    ref = _sdpa_causal(q, k, v, scale)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    (ours * ref.detach()).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (_sdpa_causal(q, k, v, scale) * ref.detach()).sum().backward()
    for a, t in zip(got, (q, k, v)):
        torch.testing.assert_close(a, t.grad, rtol=0, atol=1e-10)


@pytest.mark.parametrize("T", [9, 1])  # tiles; the single-query path
def test_attention_no_grad_path_equals_autograd_path(T):
    q, k, v = _qkv(2, 3, T, 11, 4)
    with_grad = causal_attention(q, k, v, 0.5, 4)
    with torch.no_grad():
        bare = causal_attention(q, k, v, 0.5, 4)
    assert torch.equal(with_grad.detach(), bare)
    torch.testing.assert_close(bare, _sdpa_causal(q, k, v, 0.5).detach(),
                               rtol=0, atol=1e-12)


def test_attention_tiles_skip_the_masked_half():
    """The tiles hold exactly the scores eq-tile-fraction counts."""
    from transformer.kernels import _attention_tiles
    q, k, v = _qkv(1, 1, 256, 256, 4, grad=False)
    _, tiles = _attention_tiles(q, k, v, 64)
    assert sum(t.numel() for t in tiles) == 256 * 256 * 5 // 8
    assert sum(t.shape[-2] for t in tiles) == 256


@pytest.mark.parametrize("bias", [True, False])
def test_norms_gradcheck_and_oracle(bias):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, 6, generator=g, **F64).requires_grad_()
    w = torch.randn(6, generator=g, **F64).requires_grad_()
    b = torch.randn(6, generator=g, **F64).requires_grad_() if bias else None
    args = (x, w, b) if bias else (x, w)
    assert gradcheck(lambda *a: layer_norm(a[0], a[1], b if not bias
                                           else a[2], 1e-5), args)
    assert gradcheck(lambda x, w: rms_norm(x, w, 1e-5), (x, w))
    torch.testing.assert_close(layer_norm(x, w, b, 1e-5),
                               F.layer_norm(x, (6,), w, b, 1e-5),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(rms_norm(x, w, 1e-5),
                               F.rms_norm(x, (6,), w, 1e-5),
                               rtol=0, atol=1e-12)


def test_gelu_and_cross_entropy_against_torch():
    g = torch.Generator().manual_seed(2)
    x = (4 * torch.randn(50, generator=g, **F64)).requires_grad_()
    assert gradcheck(gelu_tanh_fused, (x,))
    torch.testing.assert_close(gelu_tanh_fused(x), F.gelu(x, approximate="tanh"),
                               rtol=0, atol=1e-12)
    z = torch.randn(3, 5, 17, generator=g, **F64).requires_grad_()
    y = torch.randint(0, 17, (3, 5), generator=g)
    assert gradcheck(lambda z: cross_entropy_mean(z, y), (z,))
    ours = cross_entropy_mean(z, y)
    ref = F.cross_entropy(z.view(-1, 17), y.view(-1))
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    # a second backward through the same graph sees intact saved tensors
    ours.backward(retain_graph=True)
    first = z.grad.clone()
    z.grad = None
    ours.backward()
    assert torch.equal(first, z.grad)


def test_gelu_in_chunks_changes_no_value():
    """Above kernels._CHUNK values the forward and backward run chunk by
    chunk (move 6): on one thread the same bits as one pass over the whole
    tensor, a ragged last chunk and a non-contiguous input included (on
    more threads a split point may move a last bit), and within float32
    rounding of PyTorch's own tanh-GELU."""
    import transformer.kernels as K
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _gelu_chunks_case(K)
    finally:
        torch.set_num_threads(threads)


def _gelu_chunks_case(K):
    g = torch.Generator().manual_seed(3)
    n = 2 * K._CHUNK + 1000  # two full chunks and a ragged third
    base = 3 * torch.randn(n // 8, 16, generator=g)  # (n/8, 16)
    dy = torch.randn(16, n // 8, generator=g)  # (16, n/8)
    results = []
    for chunk in (K._CHUNK, 1 << 40):  # chunked, then one pass
        old, K._CHUNK = K._CHUNK, chunk
        try:
            x = base.t().requires_grad_()  # (16, n/8), not contiguous
            y = gelu_tanh_fused(x)
            y.backward(dy)
            results.append((y.detach(), x.grad))
        finally:
            K._CHUNK = old
    (y1, g1), (y2, g2) = results
    assert torch.equal(y1, y2) and torch.equal(g1, g2)
    ref = base.t().clone().requires_grad_()
    F.gelu(ref, approximate="tanh").backward(dy)
    torch.testing.assert_close(y1, F.gelu(base.t(), approximate="tanh"),
                               rtol=0, atol=1e-5)
    torch.testing.assert_close(g1, ref.grad, rtol=0, atol=1e-5)

def _both(cfg, B=2, T=12, seed=0):
    """Loss, logits and gradients of the same weights, fused and not."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
    out = {}
    for fused in (True, False):
        torch.manual_seed(seed)
        m = GPT(dataclasses.replace(cfg, fused=fused))
        with torch.no_grad():  # off the init, so every branch matters
            for p in m.parameters():
                p.add_(0.05 * torch.randn_like(p))
        logits, loss = m(idx, tgt)
        loss.backward()
        out[fused] = (logits.detach(), loss.detach(),
                      {n: p.grad for n, p in m.named_parameters()})
    return out


@pytest.mark.parametrize("pos,norm,norm_position,attn_scale", [
    (p, n, np_, s) for p, n, np_ in itertools.product(
        ["learned", "sinusoidal", "rope", "none"], ["layernorm", "rmsnorm"],
        ["pre", "post"]) for s in ([True, False] if p == "rope" else [True])])
def test_fused_model_equals_teaching_model(pos, norm, norm_position,
                                           attn_scale):
    cfg = GPTConfig(vocab_size=31, block_size=16, n_layer=2, n_head=2,
                    n_embd=16, pos_encoding=pos, norm=norm,
                    norm_position=norm_position, attn_scale=attn_scale)
    out = _both(cfg)
    torch.testing.assert_close(out[True][0], out[False][0],
                               rtol=0, atol=2e-6)
    torch.testing.assert_close(out[True][1], out[False][1],
                               rtol=0, atol=2e-6)
    for name, grad in out[True][2].items():
        torch.testing.assert_close(grad, out[False][2][name],
                                   rtol=1e-4, atol=1e-6, msg=name)


def test_attn_scale_off_changes_the_model():
    cfg = GPTConfig(vocab_size=31, block_size=16, n_layer=1, n_head=2,
                    n_embd=16)
    torch.manual_seed(0)
    a = GPT(cfg)
    b = GPT(dataclasses.replace(cfg, attn_scale=False))
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 31, (1, 16))
    assert not torch.allclose(a(idx)[0], b(idx)[0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_cached_decoding_equals_recompute(fused):
    cfg = GPTConfig(vocab_size=29, block_size=40, n_layer=2, n_head=2,
                    n_embd=16, pos_encoding="rope", fused=fused)
    torch.manual_seed(3)
    m = GPT(cfg).eval()
    idx = torch.randint(0, 29, (2, 30))
    with torch.no_grad():
        full, _ = m(idx)  # (2, 30, V)
        caches = make_caches(m, 2, 40)
        steps = [m(idx[:, :7], caches=caches)[0]]
        for t in range(7, 30):
            steps.append(m(idx[:, t:t + 1], start_pos=t, caches=caches)[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), full,
                               rtol=0, atol=1e-5)


def test_fused_model_matches_hugging_face_gpt2():
    hf = oracles.hf_gpt2(GPTConfig(vocab_size=50, block_size=32, n_embd=32,
                                   n_layer=2, n_head=4), attn="sdpa")
    ours = GPT.from_hf_gpt2(hf).eval()
    assert ours.config.fused
    idx = torch.randint(0, 50, (2, 32))
    with torch.no_grad():
        torch.testing.assert_close(ours(idx)[0], hf(idx).logits,
                                   rtol=0, atol=1e-5)


def test_bad_arguments():
    q, k, v = _qkv(1, 1, 4, 4, 2, grad=False)
    with pytest.raises(ValueError, match="block"):
        causal_attention(q, k, v, 1.0, block=0)
    with pytest.raises(ValueError, match="k: expected at least"):
        causal_attention(q, k[..., :2, :], v[..., :2, :], 1.0)
    with pytest.raises(ValueError, match="fused"):
        GPTConfig(vocab_size=8, block_size=8, n_layer=1, n_head=1,
                  n_embd=4, fused="yes")


@pytest.mark.parametrize("rows", [3, 200])  # one-call and two-pass paths
def test_layer_norm_both_size_paths_match_torch(rows):
    """_normalise picks torch.var_mean for a few rows and two passes for
    many (more than 16,384 numbers); both must be LayerNorm, forward and
    backward, without and with autograd."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(rows, 97, generator=g, **F64).requires_grad_()
    w = torch.randn(97, generator=g, **F64).requires_grad_()
    b = torch.randn(97, generator=g, **F64).requires_grad_()
    assert (x.numel() > 16384) == (rows == 200)
    ours = layer_norm(x, w, b, 1e-5)
    ref = F.layer_norm(x, (97,), w, b, 1e-5)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(layer_norm(x, w, b, 1e-5), ref.detach(),
                                   rtol=0, atol=1e-12)
    up = torch.randn(rows, 97, generator=g, **F64)
    got = torch.autograd.grad((ours * up).sum(), (x, w, b))
    want = torch.autograd.grad((ref * up).sum(), (x, w, b))
    for a, r in zip(got, want):
        torch.testing.assert_close(a, r, rtol=0, atol=1e-10)
