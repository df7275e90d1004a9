"""Sliding-window attention (chapter "Sliding-window attention"): the
window counted per row, the windowed tiled kernel against the dense masked
reference, the model's attn_window option, rolling-cache decoding against
one-pass scoring, FLOPs linear in T, and the errors it raises."""
import dataclasses

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer.attention import attention
from transformer.hf_files import save_hf_gpt2
from transformer.model import GPT, GPTConfig
from transformer.tiled import tiled_attention
from transformer.window import RollingKVCache, rolling_logits, visible_keys

CFG = GPTConfig(vocab_size=64, block_size=32, n_layer=2, n_head=4,
                n_embd=32, pos_encoding="rope", attn_window=8)


def window_mask(T, S, W):
    i = torch.arange(T).unsqueeze(1) + S - T
    j = torch.arange(S).unsqueeze(0)
    return (j <= i) & (j > i - W)


@pytest.mark.parametrize("T,S,W", [(10, 10, 1), (10, 10, 3), (10, 10, 10),
                                   (10, 10, 40), (4, 11, 5), (1, 9, 4)])
def test_visible_keys_count(T, S, W):
    pos = torch.arange(T) + S - T
    expected = torch.minimum(pos + 1, torch.tensor(W))
    assert visible_keys(T, S, W).tolist() == expected.tolist()
    assert window_mask(T, S, W).sum(1).tolist() == expected.tolist()


@pytest.mark.parametrize("T,S,W,block", [(50, 50, 7, 8), (33, 70, 16, 16),
                                         (64, 64, 1, 16), (97, 97, 30, 64),
                                         (20, 20, 5, 1)])
def test_windowed_kernel_equals_dense_reference(T, S, W, block):
    g = torch.Generator().manual_seed(T + S + W)
    q, k, v = (torch.randn(2, 2, n, 16, generator=g).requires_grad_()
               for n in (T, S, S))
    ref = attention(q, k, v, window_mask(T, S, W))[0]
    out = tiled_attention(q, k, v, block_size=block, window=W)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    dout = torch.randn(out.shape, generator=g)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), dout),
                    torch.autograd.grad(ref, (q, k, v), dout)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_wide_window_is_causal_attention():
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    for W in (40, 41, 1000):
        assert torch.equal(tiled_attention(q, k, v, window=W),
                           tiled_attention(q, k, v))
    full = dataclasses.replace(CFG, attn_window=None)
    torch.manual_seed(0)
    a = GPT(full).eval()
    b = GPT(dataclasses.replace(CFG, attn_window=32)).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 64, (2, 32))
    torch.testing.assert_close(b(x)[0], a(x)[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("chunk,prefill", [(1, 0), (5, 12), (3, 1),
                                           (40, 0)])
@pytest.mark.parametrize("n_kv_head", [None, 2])
def test_rolling_equals_one_pass(chunk, prefill, n_kv_head):
    torch.manual_seed(0)
    m = GPT(dataclasses.replace(CFG, n_kv_head=n_kv_head)).eval()
    idx = torch.randint(0, 64, (2, 70))  # past W = 8 and block_size = 32
    with torch.no_grad():
        ref = m(idx)[0]
    torch.testing.assert_close(rolling_logits(m, idx, chunk, prefill), ref,
                               rtol=0, atol=1e-5)


def test_forgetful_rolling_cache_is_caught():
    # keeping W - 2 positions instead of W - 1 (an off-by-one) must show
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    idx = torch.randint(0, 64, (1, 30))
    caches = [RollingKVCache(CFG.attn_window) for _ in range(CFG.n_layer)]
    for c in caches:
        c.keep -= 1
    with torch.no_grad():
        steps = torch.cat([m(idx[:, t:t + 1], start_pos=t, caches=caches)[0]
                           for t in range(30)], dim=1)
        assert (steps - m(idx)[0]).abs().max() > 1e-3


def test_rolling_cache_bytes_constant():
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    caches = [RollingKVCache(CFG.attn_window) for _ in range(CFG.n_layer)]
    sizes = []
    with torch.no_grad():
        for t in range(40):
            m(torch.randint(0, 64, (1, 1)), start_pos=t, caches=caches)
            sizes.append(sum(c.nbytes for c in caches))
    per_pos = 2 * CFG.n_layer * CFG.kv_heads * CFG.head_dim * 4
    assert sizes[:7] == [per_pos * (t + 1) for t in range(7)]
    assert set(sizes[7:]) == {per_pos * 7}


def _flops(T, W):
    q, k, v = (torch.randn(1, 1, T, 16).requires_grad_() for _ in range(3))
    with FlopCounterMode(display=False) as c:
        tiled_attention(q, k, v, block_size=16, window=W).sum().backward()
    return c.get_total_flops()


def test_window_flops_linear_in_T():
    W = 32
    f = {T: _flops(T, W) for T in (128, 256, 512)}
    # past the first window every query block visits the same tiles, so
    # each extra 128 or 256 positions cost the same per position
    per_pos = [(f[256] - f[128]) / 128, (f[512] - f[256]) / 256]
    assert per_pos[0] == per_pos[1]
    assert f[512] / f[128] < 4.5  # causal tiles would be ~14x


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "8"])
def test_rejects_bad_attn_window(bad):
    with pytest.raises(ValueError, match="^attn_window:"):
        dataclasses.replace(CFG, attn_window=bad)


def test_rejects_rolling_without_window_or_past_learned_positions():
    torch.manual_seed(0)
    idx = torch.randint(0, 64, (1, 40))
    with pytest.raises(ValueError, match="attn_window"):
        rolling_logits(GPT(dataclasses.replace(CFG, attn_window=None)), idx)
    with pytest.raises(ValueError, match="pos_encoding"):
        rolling_logits(GPT(dataclasses.replace(CFG,
                                               pos_encoding="learned")), idx)
    with pytest.raises(ValueError, match="^window:"):
        RollingKVCache(0)


def test_rejects_saving_windowed_model_as_gpt2(tmp_path):
    m = GPT(dataclasses.replace(CFG, pos_encoding="learned"))
    with pytest.raises(ValueError, match="^config.attn_window:"):
        save_hf_gpt2(m, tmp_path)
