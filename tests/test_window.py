"""Sliding-window attention (chapter "Sliding-window attention"): the
window counted per row, the windowed tiled kernel against the dense masked
reference, the model's attn_window option, rolling-cache decoding against
one-pass scoring, FLOPs linear in T, and the errors it raises."""
import dataclasses

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import tiny_study_inputs
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


# ---------------------------------------------------------------- sinks
# (move 5 of the chapter: the first k positions kept beside the last
# W - 1 - k, absolute or numbered inside the cache)

import transformer.model as model_module  # noqa: E402
from transformer.cost_model import forward_flops  # noqa: E402
from transformer.positions import apply_rope  # noqa: E402
from transformer.training import heldout_losses  # noqa: E402
from transformer.window import (LONG_ARMS, LONG_METRICS,  # noqa: E402
                                RollingScorer, long_context_arms,
                                long_context_metrics, long_context_study,
                                window_flops_per_token, with_window)


def sink_mask(T, S, W, k):
    """Query t (the last T of S positions) sees keys {0..k-1} and
    {t-W+1+k..t}, eq. (eq-window-sinks)."""
    i = torch.arange(T).unsqueeze(1) + S - T
    j = torch.arange(S).unsqueeze(0)
    return (j <= i) & ((j < k) | (j > i - W + k))


def dense_sink_pass(monkeypatch, m, idx, sinks):
    """One pass of m with its window kernel swapped for the dense
    reference under sink_mask: the oracle of move 5."""
    def dense(q, k, v, causal, block, W, scale):
        return attention(q, k, v, sink_mask(q.shape[2], k.shape[2], W,
                                            sinks), scale)[0]
    with monkeypatch.context() as mp:
        mp.setattr(model_module, "tiled_attention", dense)
        with torch.no_grad():
            return m(idx)[0]


class PlainRollingKVCache:
    """The cache as chapter 19 had it before sinks, verbatim: the oracle
    for sinks = 0."""

    def __init__(self, window):
        self.keep = window - 1
        self.k = self.v = None

    def update(self, k, v):
        if self.k is not None:
            k = torch.cat([self.k, k], dim=2)
            v = torch.cat([self.v, v], dim=2)
        start = max(0, k.shape[2] - self.keep)
        self.k = k[:, :, start:].clone()
        self.v = v[:, :, start:].clone()
        return k, v


def test_sink_mask_counts():
    m = sink_mask(8, 8, 4, 1)
    assert m.sum(1).tolist() == [1, 2, 3, 4, 4, 4, 4, 4]
    assert m[6].nonzero().flatten().tolist() == [0, 4, 5, 6]
    assert torch.equal(sink_mask(10, 10, 4, 0), window_mask(10, 10, 4))
    for k in range(4):  # W keys once past W, sinks included
        assert sink_mask(12, 12, 4, k).sum(1)[4:].tolist() == [4] * 8


def test_sinks_zero_is_plain_rolling():
    g = torch.Generator().manual_seed(1)
    new, old = RollingKVCache(5, sinks=0), PlainRollingKVCache(5)
    for T in (3, 1, 1, 4, 1, 7, 2, 1):
        k, v = (torch.randn(2, 3, T, 4, generator=g) for _ in range(2))
        for a, b in zip(new.update(k, v), old.update(k, v)):
            assert torch.equal(a, b)
        assert torch.equal(new.k, old.k) and torch.equal(new.v, old.v)
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    idx = torch.randint(0, 64, (2, 40))
    for chunk, prefill in ((1, 0), (5, 12)):
        assert torch.equal(rolling_logits(m, idx, chunk, prefill, sinks=0),
                           rolling_logits(m, idx, chunk, prefill))


@pytest.mark.parametrize("sinks", [1, 3, 7])
@pytest.mark.parametrize("prefill", [0, 5, 8])
@pytest.mark.parametrize("n_kv_head", [None, 2])
def test_sinks_equal_dense_sink_mask(monkeypatch, sinks, prefill,
                                     n_kv_head):
    torch.manual_seed(0)
    m = GPT(dataclasses.replace(CFG, n_kv_head=n_kv_head)).eval()
    idx = torch.randint(0, 64, (2, 70))  # past W = 8 and block_size = 32
    ref = dense_sink_pass(monkeypatch, m, idx, sinks)
    torch.testing.assert_close(rolling_logits(m, idx, 1, prefill, sinks),
                               ref, rtol=0, atol=1e-5)


def test_forgetful_sink_cache_is_caught(monkeypatch):
    # keeping one recent position too few (W - 2 kept) must show
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    idx = torch.randint(0, 64, (1, 30))
    ref = dense_sink_pass(monkeypatch, m, idx, 2)
    caches = [RollingKVCache(CFG.attn_window, 2) for _ in range(CFG.n_layer)]
    for c in caches:
        c.keep -= 1
    with torch.no_grad():
        steps = torch.cat([m(idx[:, t:t + 1], start_pos=t, caches=caches)[0]
                           for t in range(30)], dim=1)
    assert (steps - ref).abs().max() > 1e-3


@pytest.mark.parametrize("W,k", [(4, 1), (8, 3), (5, 4), (6, 0)])
def test_sink_cache_keeps_first_and_last(W, k):
    cache = RollingKVCache(W, k)
    for t in range(3 * W):
        v = torch.full((1, 2, 1, 3), float(t))  # values name the position
        seen = cache.update(v.clone(), v)[1][0, 0, :, 0].int().tolist()
        recent = list(range(max(k, t - W + 1 + k), t + 1))
        assert seen == list(range(min(k, t + 1))) + recent
        kept = cache.v[0, 0, :, 0].int().tolist()
        assert kept == (list(range(min(k, t + 1)))
                        + recent[1:] if t >= W - 1 else seen)
        assert cache.nbytes == 2 * 2 * 3 * 4 * min(t + 1, W - 1)


@pytest.mark.parametrize("layout", ["interleaved", "halves"])
def test_numbered_sinks_turned_by_delta(layout):
    W, k, base = 6, 2, 500.0
    g = torch.Generator().manual_seed(3)
    raw = torch.randn(1, 2, 20, 8, generator=g, dtype=torch.float64)
    numbered = RollingKVCache(W, k, (base, layout))
    absolute = RollingKVCache(W, k)
    for t in range(20):
        kt = apply_rope(raw[:, :, t:t + 1], torch.tensor([t]), base, layout)
        out = numbered.update(kt, kt)[0]
        plain = absolute.update(kt, kt)[0]
        f = max(k, t - W + 1 + k)  # oldest non-sink key handed out
        for j in range(min(k, t + 1)):  # sink j at position f - k + j
            want = apply_rope(raw[:, :, j:j + 1], torch.tensor([f - k + j]),
                              base, layout)
            torch.testing.assert_close(out[:, :, j:j + 1], want, rtol=0,
                                       atol=1e-12)
        torch.testing.assert_close(out[:, :, k:], plain[:, :, k:], rtol=0,
                                   atol=0)
        assert torch.equal(numbered.k, absolute.k)  # stored unturned


def test_numbered_sinks_equal_absolute_before_eviction(monkeypatch):
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    idx = torch.randint(0, 64, (2, 40))
    W = CFG.attn_window
    ref = dense_sink_pass(monkeypatch, m, idx, 3)
    out = rolling_logits(m, idx, 1, W, 3, reindex=True)
    torch.testing.assert_close(out[:, :W], ref[:, :W], rtol=0, atol=1e-5)
    assert (out[:, W:] - ref[:, W:]).abs().max() > 1e-6  # then they differ


@pytest.mark.parametrize("sinks", [1, 4, 7])
@pytest.mark.parametrize("n_kv_head", [None, 2])
def test_numbered_sinks_one_layer_equals_kept_text(sinks, n_kv_head):
    # one layer: a key depends only on its token and position, so decoding
    # position t equals one pass over the kept tokens placed at t - W + 1
    torch.manual_seed(0)
    m = GPT(dataclasses.replace(CFG, n_layer=1, n_kv_head=n_kv_head)).eval()
    idx = torch.randint(0, 64, (2, 50))
    W = CFG.attn_window
    out = rolling_logits(m, idx, 1, 0, sinks, reindex=True)
    with torch.no_grad():
        for t in range(W, 50):
            kept = torch.cat([idx[:, :sinks], idx[:, t - W + 1 + sinks:t + 1]],
                             dim=1)  # (B, W)
            last = m(kept, start_pos=t - W + 1)[0][:, -1]  # (B, V)
            torch.testing.assert_close(out[:, t], last, rtol=0, atol=1e-5)


@pytest.mark.parametrize("bad", [-1, 8, 9, True, 1.0, "2", None])
def test_rejects_bad_sinks(bad):
    with pytest.raises(ValueError, match="^sinks:"):
        RollingKVCache(8, sinks=bad)
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="^sinks:"):
        rolling_logits(GPT(CFG).eval(), torch.randint(0, 64, (1, 10)),
                       sinks=bad)


@pytest.mark.parametrize("bad", [(0, "interleaved"), (-1.0, "halves"),
                                 (1e4, "bogus"), (True, "halves"), "x",
                                 (1e4,), [1e4, "halves"]])
def test_rejects_bad_rope(bad):
    with pytest.raises(ValueError, match="^rope:"):
        RollingKVCache(8, 2, bad)


def test_rejects_bad_sinks_arguments():
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    idx = torch.randint(0, 64, (1, 20))
    with pytest.raises(ValueError, match="^chunk:"):
        rolling_logits(m, idx, 2, 0, sinks=1)
    with pytest.raises(ValueError, match="^prefill:"):
        rolling_logits(m, idx, 1, CFG.attn_window + 1, sinks=1)
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError, match="^reindex:"):
            rolling_logits(m, idx, 1, 0, 1, reindex=bad)
    with pytest.raises(ValueError, match="^reindex:"):  # nothing to number
        rolling_logits(m, idx, 1, 0, 0, reindex=True)
    learned = GPT(dataclasses.replace(CFG, pos_encoding="learned")).eval()
    with pytest.raises(ValueError, match="^reindex:"):
        rolling_logits(learned, idx, 1, 0, 1, reindex=True)
    cache = RollingKVCache(4, 1)
    cache.update(*(torch.zeros(1, 1, 3, 2) for _ in range(2)))
    with pytest.raises(ValueError, match="^k:"):  # would end at position 4
        cache.update(*(torch.zeros(1, 1, 2, 2) for _ in range(2)))
    cache.update(*(torch.zeros(1, 1, 1, 2) for _ in range(2)))  # one: fine


# ------------------------------------------------------- E36's measurement

def test_window_flops_per_token():
    cfg = dataclasses.replace(CFG, attn_window=None)
    D, L = cfg.n_embd, cfg.n_layer
    for T, W in ((32, None), (32, 8), (100, 8), (16, 40)):
        f = forward_flops(T, 1, cfg)
        n = sum(min(i + 1, W or T) for i in range(T))  # keys per query
        want = (f["total"] - f["attention_quadratic"] + L * 4 * D * n) / T
        assert window_flops_per_token(cfg, T, W) == want
    # full attention at 16T costs more per token than any window
    assert window_flops_per_token(cfg, 512, None) > \
        window_flops_per_token(cfg, 512, 32) > \
        window_flops_per_token(cfg, 512, 8)


def test_with_window_is_the_same_function_inside_the_window():
    torch.manual_seed(0)
    full = GPT(dataclasses.replace(CFG, attn_window=None)).eval()
    w = with_window(full, 32)
    assert w.config.attn_window == 32 and not w.training
    x = torch.randint(0, 64, (2, 32))
    with torch.no_grad():
        torch.testing.assert_close(w(x)[0], full(x)[0], rtol=0, atol=1e-5)


def test_one_batch_scores_the_same_windows():
    # the decoded arms score run.batch_size * eval_batches windows in one
    # batch: the same windows as eval_batches batches of batch_size
    torch.manual_seed(0)
    m = GPT(CFG).eval()
    ids = torch.randint(0, 64, (3000,))
    a = heldout_losses(m, ids, 40, 8, 1, 1234)
    b = heldout_losses(m, ids, 40, 2, 4, 1234)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    scorer = RollingScorer(m, 2, True)
    c = heldout_losses(scorer, ids, 40, 8, 1, 1234)
    assert c.shape == a.shape  # and, before the first eviction, a's
    torch.testing.assert_close(c[:, :CFG.attn_window],
                               a[:, :CFG.attn_window], rtol=0, atol=1e-5)


def _tiny_long_context(seed=0, arms=LONG_ARMS):
    ids, model, run = tiny_study_inputs(3000, eval_batches=2)
    return long_context_arms(seed, (None, ids, ids), model, run, arms,
                             n_windows=3), ids, model


def test_long_context_arms_records_and_metrics():
    # the study as the probe runs it, in its smoke shape (T = 16)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (3000,), generator=g)
    run = {"steps": 400, "batch_size": 32, "eval_interval": 100,
           "warmup_steps": 20, "eval_batches": 4, "eval_seed": 1234,
           "checkpoint_interval": 0}
    out = long_context_study(0, (None, ids, ids), {
        "vocab_size": 40, "n_embd": 96, "n_head": 4, "n_layer": 3,
        "block_size": 64}, run, smoke=True)
    arms, model = out["raw"]["arms"], out["raw"]["byte_model"]
    assert model == {"vocab_size": 40, "n_embd": 32, "n_head": 2,
                     "n_layer": 1, "block_size": 16}
    assert out["raw"]["byte_run"]["steps"] == 3
    T = model["block_size"]
    assert list(arms) == list(LONG_ARMS)
    assert [arms[a]["window"] for a in arms] == [None, 8, 4, 2, 16, 16, 16]
    assert [arms[a]["sinks"] for a in arms] == [0, 0, 0, 0, 0, 4, 4]
    for name, rec in arms.items():
        assert len(rec["loss_per_position"]) == 16 * T
        assert list(rec["copy_gain"]) == ["16", "64", "256"]
        assert list(rec["copy_gain"]["64"]) == ["2", "4", "8", "16", "32"]
        assert list(rec["copy_gain"]["256"]) == ["2", "240"]
        assert rec["flops_per_token"]["16"] == window_flops_per_token(
            GPTConfig(**model, pos_encoding="rope",
                      attn_window=rec["window"]), T, rec["window"])
    # the rolling arms decode the trained full model: its curve at first
    for name in ("roll", "roll_sink4", "roll_sink4_abs"):
        assert arms[name]["train_loss"] == arms["full"]["train_loss"]
        a, b = arms[name]["loss_per_position"], arms["full"]["loss_per_position"]
        assert max(abs(x - y) for x, y in zip(a[:T], b[:T])) < 1e-4
    final = long_context_metrics(arms, T)
    assert final == {k: v for k, v in out.items() if k != "raw"}
    assert set(LONG_METRICS) <= set(final)
    assert final["w_t8_gain_W"] == arms["w_t8"]["copy_gain"]["64"]["2"]
    assert final["roll_gain_2W"] == arms["roll"]["copy_gain"]["64"]["32"]
    pos = arms["roll"]["loss_per_position"]
    assert final["roll_rise"] == pytest.approx(
        sum(pos[4 * T:]) / (12 * T) - sum(pos[T // 2:T]) / (T // 2),
        abs=1e-12)
    assert final["sink4_minus_roll_16T"] == pytest.approx(
        final["roll_sink4_16T"] - final["roll_16T"], abs=1e-12)
    some = {a: LONG_ARMS[a] for a in ("full", "w_t8")}
    again = long_context_arms(0, (None, ids, ids), model,  # deterministic
                              out["raw"]["byte_run"], some, n_windows=4)
    for a in some:
        assert {k: v for k, v in again[a].items() if k != "cpu_s"} == \
            {k: v for k, v in arms[a].items() if k != "cpu_s"}


def test_long_context_roll_arm_is_rolling_decoding():
    # the no-sink arm is scored in one pass through its window: the same
    # numbers as decoding it through rolling caches, past W
    torch.manual_seed(0)
    full = GPT(dataclasses.replace(CFG, attn_window=None)).eval()
    net = with_window(full, 16)
    idx = torch.randint(0, 64, (2, 60))
    with torch.no_grad():
        one = net(idx)[0]
    torch.testing.assert_close(RollingScorer(net)(idx)[0], one, rtol=0,
                               atol=1e-5)


def test_long_context_rejects_rolling_before_its_model_and_short_T():
    with pytest.raises(ValueError, match="^arms:"):
        _tiny_long_context(arms={"roll": {"rolling_of": "full"}})
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (3000,), generator=g)
    with pytest.raises(ValueError, match="^model: expected block_size"):
        long_context_arms(0, (None, ids, ids), {
            "vocab_size": 40, "n_embd": 16, "n_head": 2, "n_layer": 1,
            "block_size": 8}, {"steps": 1}, {"full": {}})
