"""Chapter "Positional encodings": RoPE's two properties, the Hugging Face
Llama rotary code as the oracle, and mutation checks for the two classic
RoPE bugs (wrong pairing, rotating values)."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer import apply_rope, attention, causal_mask, sinusoidal_encoding


def rand(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def rope_halves_wrong_freqs(x, positions, base=10000.0):
    """Mutation: split-halves pairing (i, i + d/2) with the frequencies
    indexed as for interleaved pairs (coordinate j turns at ω_{j//2})."""
    d = x.shape[-1]
    w = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.double().unsqueeze(-1) * w.repeat_interleave(2)
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return (x * ang.cos().to(x.dtype)
            + torch.cat([-x2, x1], -1) * ang.sin().to(x.dtype))


def _score(rope, q, k, m, n):
    return (rope(q.view(1, -1), torch.tensor([m]))
            @ rope(k.view(1, -1), torch.tensor([n])).T).item()


def _relative_holds(rope, Dh=64, seed=0, atol=1e-6):
    """Property 5 as a predicate: same m - n -> same score, to atol."""
    q, k = rand(Dh, seed=seed), rand(Dh, seed=seed + 1)
    for diff in (0, 1, 2, 17, -5):
        ref = _score(rope, q, k, 3 + abs(diff) + diff, 3 + abs(diff))
        for base_pos in (10, 105, 998, 4096):
            s = _score(rope, q, k, base_pos + diff, base_pos)
            if abs(s - ref) > atol:
                return False
    return True


def _norm_holds(rope, Dh=64, seed=0, atol=1e-6):
    """Property 6 as a predicate."""
    x = rand(3, 50, Dh, seed=seed)  # (B, T, Dh)
    pos = torch.arange(0, 5000, 100)  # (T,)
    return torch.allclose(rope(x, pos).norm(dim=-1), x.norm(dim=-1),
                          rtol=0, atol=atol)


@pytest.mark.parametrize("Dh", [2, 8, 64, 128])
@pytest.mark.parametrize("seed", range(3))
def test_rope_relative_position(Dh, seed):
    assert _relative_holds(apply_rope, Dh=Dh, seed=seed)
    # the chapter's pairs, explicitly
    q, k = rand(64, seed=seed), rand(64, seed=seed + 1)
    scores = [_score(apply_rope, q, k, m, n)
              for m, n in [(5, 3), (105, 103), (7, 5), (1000, 998)]]
    assert max(scores) - min(scores) < 1e-6
    assert abs(_score(apply_rope, q, k, 6, 3) - scores[0]) > 1e-6


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 5000), n=st.integers(0, 5000),
       shift=st.integers(0, 5000), seed=st.integers(0, 1000))
def test_rope_relative_position_any_shift(m, n, shift, seed):
    q, k = rand(32, seed=seed), rand(32, seed=seed + 1)
    a = _score(apply_rope, q, k, m, n)
    b = _score(apply_rope, q, k, m + shift, n + shift)
    assert abs(a - b) < 1e-6


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-6),
                                        (torch.float32, 1e-5)])
def test_rope_preserves_norm(dtype, atol):
    for seed in range(3):
        x = rand(2, 4, 50, 64, seed=seed).to(dtype)  # (B, H, T, Dh)
        y = apply_rope(x, torch.arange(0, 5000, 100))
        # float32 norms of size ~8 are only good to ~1e-6 relative
        torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=0,
                                   atol=atol)
    assert _norm_holds(apply_rope)


def test_matches_hf_llama_rotary():
    """Oracle: Hugging Face's Llama rotary code (split halves) equals ours
    (interleaved pairs) after sending coordinate 2i to i, 2i+1 to i + d/2."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding, apply_rotary_pos_emb)
    B, H, T, Dh = 2, 3, 40, 32
    to_halves = torch.cat([torch.arange(0, Dh, 2), torch.arange(1, Dh, 2)])
    for base in (10000.0, 500.0):
        cfg = LlamaConfig(hidden_size=H * Dh, num_attention_heads=H,
                          rope_theta=base, max_position_embeddings=8192)
        rot = LlamaRotaryEmbedding(cfg)
        # (a) their cos/sin (computed in float32) at positions < 40
        q, k = rand(B, H, T, Dh, seed=1), rand(B, H, T, Dh, seed=2)
        pos = torch.arange(T).unsqueeze(0).expand(B, T)  # (B, T)
        cos, sin = rot(q, pos)  # (B, T, Dh) each
        hq, hk = apply_rotary_pos_emb(q[..., to_halves], k[..., to_halves],
                                      cos, sin)
        ours_q = apply_rope(q, torch.arange(T), base)[..., to_halves]
        ours_k = apply_rope(k, torch.arange(T), base)[..., to_halves]
        # float32 angles: rounding of m·ω is below 40 · 6e-8 rad
        torch.testing.assert_close(ours_q, hq, rtol=0, atol=1e-5)
        torch.testing.assert_close(ours_k, hk, rtol=0, atol=1e-5)
        # (b) their frequencies (stored in float32) match the formula to
        # float32 precision; their pairing code with those frequencies in
        # float64 then agrees with ours at large positions to 1e-6
        w = base ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
        torch.testing.assert_close(rot.inv_freq.double(), w, rtol=1e-6,
                                   atol=0)
        far = torch.arange(4000, 4000 + T)  # (T,)
        ang = far.double().unsqueeze(-1) * w  # (T, Dh/2)
        emb = torch.cat([ang, ang], -1)  # (T, Dh)
        hq, _ = apply_rotary_pos_emb(q[..., to_halves], k[..., to_halves],
                                     emb.cos()[None], emb.sin()[None])
        ours_q = apply_rope(q, far, base=base)[..., to_halves]
        torch.testing.assert_close(ours_q, hq, rtol=0, atol=1e-6)


def test_wrong_pairing_is_caught():
    assert _relative_holds(apply_rope) and _norm_holds(apply_rope)
    assert not _relative_holds(rope_halves_wrong_freqs)
    assert not _norm_holds(rope_halves_wrong_freqs)


def _rope_attention(x, positions, rotate_values):
    q, k = apply_rope(x, positions), apply_rope(x, positions)
    v = apply_rope(x, positions) if rotate_values else x
    return attention(q, k, v, causal_mask(x.shape[-2]))[0]


def _translation_invariant(rotate_values, seed=0):
    x = rand(2, 3, 9, 16, seed=seed)  # (B, H, T, Dh)
    pos = torch.arange(9)
    ref = _rope_attention(x, pos, rotate_values)
    return all(torch.allclose(ref, _rope_attention(x, pos + c, rotate_values),
                              rtol=0, atol=1e-6) for c in (1, 100, 3000))


def test_rope_on_values_is_caught():
    assert _translation_invariant(rotate_values=False)
    assert not _translation_invariant(rotate_values=True)


def test_sinusoidal():
    D = 16
    P = sinusoidal_encoding(300, D, dtype=torch.float64)  # (T, D)
    m = torch.arange(300, dtype=torch.float64)
    for i in range(D // 2):
        w = 10000.0 ** (-2 * i / D)
        torch.testing.assert_close(P[:, 2 * i], torch.sin(m * w), rtol=0,
                                   atol=1e-12)
        torch.testing.assert_close(P[:, 2 * i + 1], torch.cos(m * w), rtol=0,
                                   atol=1e-12)
    # offset rows equal the tail of a longer table
    torch.testing.assert_close(
        sinusoidal_encoding(10, D, offset=290, dtype=torch.float64), P[290:],
        rtol=0, atol=1e-12)
    # P_m . P_n depends only on m - n
    dots = [(P[a] @ P[a - 4]).item() for a in (4, 50, 299)]
    assert max(dots) - min(dots) < 1e-9
    assert math.isclose(P[7].norm().item() ** 2, D / 2, abs_tol=1e-9)
    assert sinusoidal_encoding(5, 8).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shapes_and_dtypes(dtype):
    for shape in [(7, 8), (2, 7, 8), (2, 3, 7, 8)]:
        x = rand(*shape).to(dtype)
        y = apply_rope(x, torch.arange(7))
        assert y.shape == x.shape and y.dtype == dtype
    # per-batch positions, broadcast against (B, H, T)
    x = rand(2, 3, 5, 8).to(dtype)
    pos = torch.stack([torch.arange(5), torch.arange(10, 15)])  # (B, T)
    y = apply_rope(x, pos.unsqueeze(1))
    torch.testing.assert_close(y[1], apply_rope(x[1], torch.arange(10, 15)),
                               rtol=0, atol=0)
    # position 0 is the identity
    torch.testing.assert_close(apply_rope(x, torch.zeros(5, dtype=torch.long)),
                               x, rtol=0, atol=0)


def test_bad_input():
    x = rand(2, 5, 8)
    with pytest.raises(ValueError, match="Dh"):
        apply_rope(rand(2, 5, 7), torch.arange(5))
    with pytest.raises(ValueError, match="positions"):
        apply_rope(x, torch.arange(5).double())
    with pytest.raises(ValueError, match="positions"):
        apply_rope(x, torch.arange(6))
    with pytest.raises(ValueError, match="x"):
        apply_rope(x.long(), torch.arange(5))
    with pytest.raises(ValueError, match="base"):
        apply_rope(x, torch.arange(5), base=0.0)
    with pytest.raises(ValueError, match="D"):
        sinusoidal_encoding(4, 7)
    with pytest.raises(ValueError, match="T"):
        sinusoidal_encoding(-1, 8)
