"""The KV cache (chapter 12_kv_cache): cached decoding equals full
recompute for every positional encoding, the cache's bytes equal the
derived formula exactly, and Hugging Face GPT-2 with its own cache is an
oracle for the tokens."""
import pytest
import torch

import oracles  # tools/, on sys.path via the root conftest.py

from transformer.cost_model import kv_cache_bytes
from transformer.kv_cache import (KVCache, decode_step_bytes, decode_floor,
                                  generate, make_caches)
from transformer.model import GPT, GPTConfig

ENCODINGS = ("learned", "sinusoidal", "rope", "none")


# toy models: one thread (the fixture is in tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(pos_encoding="learned", **kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=61, block_size=48, n_layer=2, n_head=2, n_embd=16,
               pos_encoding=pos_encoding)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


@pytest.mark.parametrize("pos_encoding", ENCODINGS)
@pytest.mark.parametrize("norm_position", ("pre", "post"))
def test_cached_logits_equal_full_recompute(pos_encoding, norm_position):
    model = tiny(pos_encoding, norm_position=norm_position)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 61, (3, 40), generator=g)  # (B, T)
    with torch.no_grad():
        full, _ = model(idx)  # (B, T, V)
        caches = make_caches(model, 3, 40)
        parts = [model(idx[:, :7], caches=caches)[0]]  # prefill 7
        for t in range(7, 40):  # then one token at a time
            parts.append(model(idx[:, t:t + 1], start_pos=t,
                               caches=caches)[0])
    inc = torch.cat(parts, dim=1)  # (B, T, V)
    torch.testing.assert_close(inc, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("pos_encoding", ENCODINGS)
def test_cached_greedy_tokens_identical(pos_encoding):
    model = tiny(pos_encoding)
    idx = torch.randint(0, 61, (2, 5),
                        generator=torch.Generator().manual_seed(2))
    a = generate(model, idx, 40, temperature=0, use_cache=True)
    b = generate(model, idx, 40, temperature=0, use_cache=False)
    assert torch.equal(a, b)
    assert torch.equal(a[:, :5], idx) and a.shape == (2, 45)


@pytest.mark.parametrize("pos_encoding", ENCODINGS)
def test_cached_sampling_identical_with_same_seed(pos_encoding):
    model = tiny(pos_encoding)
    idx = torch.randint(0, 61, (2, 3),
                        generator=torch.Generator().manual_seed(3))
    kw = dict(temperature=0.9, top_k=20, top_p=0.95)
    a = generate(model, idx, 30, use_cache=True,
                       generator=torch.Generator().manual_seed(4), **kw)
    b = generate(model, idx, 30, use_cache=False,
                       generator=torch.Generator().manual_seed(4), **kw)
    assert torch.equal(a, b)


def test_forgetful_cache_is_caught():
    """Mutation check: a cache that returns only the new keys and values
    (attending to the current token alone) must break the equality."""

    class Forgetful:
        def update(self, k, v):
            return k, v

    model = tiny()
    idx = torch.randint(0, 61, (1, 20),
                        generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        full, _ = model(idx)  # (1, T, V)
        caches = [Forgetful() for _ in range(2)]
        inc = torch.cat([model(idx[:, t:t + 1], start_pos=t,
                               caches=caches)[0] for t in range(20)], 1)
    assert (inc - full).abs().max() > 1e-3


@pytest.mark.parametrize("B,T", [(1, 1), (1, 17), (3, 40)])
def test_cache_bytes_equal_derived_formula(B, T):
    model = tiny()
    caches = make_caches(model, B, T)
    with torch.no_grad():
        model(torch.zeros(B, T, dtype=torch.int64), caches=caches)
    measured = sum(c.nbytes for c in caches)
    assert measured == kv_cache_bytes(T, B, model.config, bytes_per=4)
    assert all(c.length == T for c in caches)
    half = make_caches(model.to(torch.float64), B, T)
    assert sum(c.nbytes for c in half) == kv_cache_bytes(
        T, B, model.config, bytes_per=8)


def _touched_bytes(model):
    """Bytes of the parameter tensors a decode step reads, counted from
    the tensors: all of them (a tied table once), but one row of the
    position table and, when the output layer has its own matrix, one
    row of the input token table."""
    total = 0
    untied = model.lm_head.weight is not model.wte.weight
    for name, p in model.named_parameters():
        one_row = name == "wpe.weight" or (name == "wte.weight" and untied)
        used = p[:1] if one_row else p  # (1, D) or the whole tensor
        total += used.numel() * used.element_size()
    return total


@pytest.mark.parametrize("kw", [
    dict(),  # GPT-2's layout: learned positions, tied
    dict(pos_encoding="rope", tie_weights=False),
    dict(norm_position="post", norm="rmsnorm", bias=False),
    dict(pos_encoding="sinusoidal", dtype=torch.float64),
])
@pytest.mark.parametrize("B,S", [(1, 1), (1, 23), (3, 40)])
def test_decode_step_bytes_equal_counted_tensors(kw, B, S):
    """eq. (eq-decode-floor) against the tensors: the parameters a step
    touches plus the caches PyTorch allocated after decoding S positions
    (a prefill of S - 1, then one step)."""
    kw = dict(kw)
    dtype = kw.pop("dtype", torch.float32)
    model = tiny(**kw).to(dtype)
    caches = make_caches(model, B, S)
    idx = torch.randint(0, 61, (B, S),
                        generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        if S > 1:
            model(idx[:, :S - 1], caches=caches)
        model(idx[:, S - 1:], start_pos=S - 1, caches=caches)
    assert all(c.length == S for c in caches)
    b = torch.finfo(dtype).bits // 8
    got = decode_step_bytes(model.config, S, B, bytes_per=b)
    assert got["weights"] == _touched_bytes(model)
    assert got["cache"] == sum(c.nbytes for c in caches)
    assert got["total"] == got["weights"] + got["cache"]
    assert decode_floor(model.config, S, 2.5e9, B, b) == pytest.approx(
        got["total"] / 2.5e9, rel=1e-12)


def test_decode_step_bytes_gpt2_small_by_hand():
    """The chapter's worked example, and the weights equal the
    Hugging Face model's parameters less the unread position rows."""
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12,
                    n_head=12, n_embd=768)
    got = decode_step_bytes(cfg, 1024)
    assert got["weights"] == 4 * (124_439_808 - 1023 * 768)
    assert got["cache"] == 2 * 12 * 1024 * 768 * 4


def test_decode_step_bytes_rejects_bad_arguments():
    cfg = tiny().config
    for call, name in ((lambda: decode_step_bytes(cfg, 0), "S"),
                       (lambda: decode_step_bytes(cfg, 2.0), "S"),
                       (lambda: decode_step_bytes({"n_embd": 8}, 3), "config"),
                       (lambda: decode_floor(cfg, 3, 0.0), "bandwidth"),
                       (lambda: decode_floor(cfg, 3, "1e9"), "bandwidth")):
        with pytest.raises(ValueError, match=name):
            call()


def test_matches_hugging_face_gpt2_with_its_cache():
    """Greedy generation equals Hugging Face's own, token for token; so
    does oracles.hf_greedy_stream, which tools/bench_kv_cache.py's
    lockstep (shared by the roofline benchmark) times against the
    package's decode_stream: n - 1 step times each, the same tokens."""
    import bench_kv_cache  # tools/, on sys.path via the root conftest.py
    hf = oracles.hf_gpt2(GPTConfig(vocab_size=97, block_size=64, n_embd=32,
                                   n_layer=2, n_head=4))
    ours = GPT.from_hf_gpt2(hf).eval()
    idx = torch.randint(0, 97, (1, 6),
                        generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        ref = hf.generate(idx, max_new_tokens=30, do_sample=False,
                          use_cache=True, pad_token_id=0,
                          attention_mask=torch.ones_like(idx))
        theirs = list(oracles.hf_greedy_stream(hf, idx, 30))
        ta, tb, same = bench_kv_cache.lockstep(ours, hf, idx, 30)
    got = generate(ours, idx, 30, temperature=0)
    assert torch.equal(got, ref)
    assert torch.equal(torch.cat([idx[0], *theirs]), ref[0])
    assert len(ta) == len(tb) == 29 and same and min(ta + tb) > 0


def test_cache_rejects_bad_updates():
    c = KVCache(1, 2, 4, 8)
    k = torch.zeros(1, 2, 3, 8)  # (B, H, T, Dh)
    c.update(k, k)
    with pytest.raises(ValueError, match="overflow"):
        c.update(k, k)
    with pytest.raises(ValueError, match="k, v"):
        KVCache(1, 2, 4, 8).update(torch.zeros(1, 3, 1, 8),
                                   torch.zeros(1, 3, 1, 8))
    with pytest.raises(ValueError, match="max_len"):
        KVCache(1, 2, 0, 8)


def test_generate_rejects_bad_arguments():
    model = tiny()
    idx = torch.zeros(1, 3, dtype=torch.int64)
    cases = [
        (dict(idx=torch.zeros(1, 49, dtype=torch.int64)), "idx"),
        (dict(max_new_tokens=46), "max_new_tokens"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(temperature=-0.5), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(idx=idx.float()), "idx"),
        (dict(use_cache=1), "use_cache"),
    ]
    for kw, name in cases:
        args = dict(idx=idx, max_new_tokens=4)
        args.update(kw)
        with pytest.raises(ValueError, match=name):
            generate(model, **args)


def test_zero_new_tokens_returns_prompt():
    model = tiny()
    idx = torch.arange(5)[None]  # (1, 5)
    assert torch.equal(generate(model, idx, 0), idx)


# ------------------------------------------------------- decode_stream
# The one decoding loop: generate collects it; `python -m transformer
# sample` prints what it yields, and keeps going past block_size.

def sliding_oracle(model, idx, n, keep_half):
    """Greedy decoding by full recompute of a window of at most
    block_size tokens; with keep_half, the window drops its older half
    when it is full (the cached path's rule), else it slides by one."""
    block = model.config.block_size
    window, out = idx[:, -block:], []
    with torch.no_grad():
        for _ in range(n):
            nxt = model(window)[0][:, -1].argmax(-1)  # (B,)
            out.append(nxt)
            full = window.shape[1] == block
            window = torch.cat([window, nxt[:, None]], 1)[:, -block:]
            if keep_half and full:
                window = window[:, -(block // 2):]
    return torch.stack(out, 1)  # (B, n)


@pytest.mark.parametrize("pos_encoding", ENCODINGS)
def test_decode_stream_slides_past_the_context(pos_encoding):
    from transformer.kv_cache import decode_stream
    model = tiny(pos_encoding, block_size=12)
    idx = torch.randint(0, 61, (2, 20),
                        generator=torch.Generator().manual_seed(4))  # > 12
    for use_cache in (False, True):
        got = torch.stack(list(decode_stream(
            model, idx, 30, temperature=0, use_cache=use_cache)), 1)
        want = sliding_oracle(model, idx, 30, keep_half=use_cache)
        assert torch.equal(got, want), use_cache


def test_decode_stream_yields_one_token_at_a_time():
    from transformer.kv_cache import decode_stream
    model = tiny()
    idx = torch.randint(0, 61, (1, 5),
                        generator=torch.Generator().manual_seed(5))
    stream = decode_stream(model, idx, 40, temperature=0)
    first = next(stream)
    assert first.shape == (1,) and first.dtype == torch.int64
    assert torch.is_grad_enabled()  # no_grad holds only inside the loop
    rest = list(stream)
    assert torch.equal(torch.stack([first, *rest], 1),
                       generate(model, idx, 40, temperature=0)[:, 5:])
    with pytest.raises(ValueError, match="^max_new_tokens"):
        next(decode_stream(model, idx, -1))


def test_held_cache_bytes_counts_what_decoding_holds_and_can_fail():
    """held_cache_bytes counts the tensors the caches of a real
    decode_stream generation hold: one cache set, one cache per layer,
    T0 + N - 1 positions filled, exactly kv_cache_bytes at block_size. A
    loop that allocates twice the positions it asks for is counted as
    twice the bytes."""
    import transformer.kv_cache as kv
    cfg = GPTConfig(vocab_size=64, block_size=48, n_layer=2, n_head=2,
                    n_embd=16)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    prompt = torch.randint(0, 64, (3, 5))  # (B, T0)
    with torch.no_grad():
        held = kv.held_cache_bytes(model, prompt, 20)
    assert held == {"new": 20, "cache_sets": 1, "layers": 2, "filled": 24,
                    "held_bytes": kv_cache_bytes(48, 3, cfg)}
    real = kv.make_caches
    kv.make_caches = lambda model, B, max_len: real(model, B, 2 * max_len)
    try:
        with torch.no_grad():
            bad = kv.held_cache_bytes(model, prompt, 20)
    finally:
        kv.make_caches = real
    assert bad["held_bytes"] == 2 * held["held_bytes"]


def test_decode_step_times_one_per_new_token():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=32, n_layer=1, n_head=2,
                          n_embd=16)).eval()
    prompt = torch.randint(0, 64, (1, 4))  # (1, T0)
    from transformer.kv_cache import decode_step_times
    with torch.no_grad():
        for cached in (True, False):
            times = decode_step_times(model, prompt, 6, cached)
            assert len(times) == 6 and all(t > 0 for t in times)
