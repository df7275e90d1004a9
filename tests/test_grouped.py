"""Grouped-query attention (chapter "Grouped-query attention"): the
n_kv_head option of GPTConfig against multi-head attention, PyTorch's SDPA
with enable_gqa and Hugging Face's Llama attention (oracles used here
only), the KV cache it keeps, and the errors it raises."""
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from transformer.attention import attention, causal_mask
from transformer.grouped import (grouped_attention, grouped_cache_bytes,
                                 grouped_decode, grouped_heads)
from transformer.kv_cache import generate, make_caches
from transformer.hf_files import save_hf_gpt2
from transformer.model import GPT, GPTConfig, gpt_param_count

BASE = GPTConfig(vocab_size=64, block_size=32, n_layer=2, n_head=4,
                 n_embd=32)


def model(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(dataclasses.replace(BASE, **kw)).eval()


def idx(B=2, T=20, seed=0):
    return torch.randint(0, 64, (B, T),
                         generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_full_kv_heads_is_multi_head_exactly(fused, pos):
    a = model(fused=fused, pos_encoding=pos)
    b = model(fused=fused, pos_encoding=pos, n_kv_head=4)
    assert a.state_dict().keys() == b.state_dict().keys()
    for x, y in zip(a.state_dict().values(), b.state_dict().values()):
        assert torch.equal(x, y)
    assert torch.equal(a(idx())[0], b(idx())[0])


def expand_to_mha(gqa):
    c = gqa.config
    D, Dh, Hkv, g = c.n_embd, c.head_dim, c.kv_heads, c.n_head // c.kv_heads
    state = gqa.state_dict()
    for name, t in list(state.items()):
        if name.endswith(("attn.c_attn.weight", "attn.c_attn.bias")):
            q, k, v = t.split([D, Hkv * Dh, Hkv * Dh], dim=-1)
            rep = [torch.repeat_interleave(x.unflatten(-1, (Hkv, Dh)), g,
                                           dim=-2).flatten(-2)
                   for x in (k, v)]
            state[name] = torch.cat([q, *rep], dim=-1)
    mha = GPT(dataclasses.replace(c, n_kv_head=None)).eval()
    mha.load_state_dict(state)
    return mha


@pytest.mark.parametrize("Hkv", [1, 2])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_equals_multi_head_with_copied_projections(Hkv, fused, pos):
    gqa = model(n_kv_head=Hkv, fused=fused, pos_encoding=pos)
    torch.testing.assert_close(gqa(idx())[0], expand_to_mha(gqa)(idx())[0],
                               rtol=0, atol=1e-6)


def test_mutated_grouping_is_caught():
    # Tensor.repeat's tiled grouping (head h <- h % Hkv) is another model
    gqa = model(n_kv_head=2)
    c = gqa.config
    D, Dh = c.n_embd, c.head_dim
    state = gqa.state_dict()
    for name, t in list(state.items()):
        if name.endswith(("attn.c_attn.weight", "attn.c_attn.bias")):
            q, k, v = t.split([D, 2 * Dh, 2 * Dh], dim=-1)
            tile = [x.unflatten(-1, (2, Dh)).repeat(
                *([1] * (x.dim() - 1)), 2, 1).flatten(-2) for x in (k, v)]
            state[name] = torch.cat([q, *tile], dim=-1)
    wrong = GPT(dataclasses.replace(c, n_kv_head=None)).eval()
    wrong.load_state_dict(state)
    assert (gqa(idx())[0] - wrong(idx())[0]).abs().max() > 1e-3


@pytest.mark.parametrize("Hkv", [1, 2, 4])
@pytest.mark.parametrize("causal", [True, False])
def test_equals_sdpa_enable_gqa(Hkv, causal):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 8, 13, 16, generator=g)
    k, v = (torch.randn(2, Hkv, 13, 16, generator=g) for _ in range(2))
    mask = causal_mask(13) if causal else None
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                         enable_gqa=True)
    torch.testing.assert_close(grouped_attention(q, k, v, mask), ref,
                               rtol=0, atol=1e-5)


def test_equals_hf_llama_attention():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention
    cfg = LlamaConfig(hidden_size=32, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64,
                      attention_bias=False, attention_dropout=0.0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = LlamaAttention(cfg, layer_idx=0).eval()
    ours = model(n_kv_head=2, bias=False, pos_encoding="none").blocks[0].attn
    with torch.no_grad():
        ours.c_attn.weight.copy_(torch.cat(
            [hf.q_proj.weight.T, hf.k_proj.weight.T, hf.v_proj.weight.T],
            dim=1))
        ours.c_proj.weight.copy_(hf.o_proj.weight.T)
    x = torch.randn(2, 11, 32, generator=torch.Generator().manual_seed(2))
    T = x.shape[1]
    cos, sin = torch.ones(2, T, 8), torch.zeros(2, T, 8)  # no rotation
    bias = torch.zeros(T, T).masked_fill(~causal_mask(T), float("-inf"))
    with torch.no_grad():
        ref = hf(x, position_embeddings=(cos, sin),
                 attention_mask=bias[None, None])[0]
        torch.testing.assert_close(ours(x), ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("Hkv", [1, 2, 4])
def test_cache_holds_kv_heads_and_matches_recompute(Hkv):
    m = model(n_kv_head=Hkv, pos_encoding="rope")
    caches = make_caches(m, 3, 32)
    assert all(c.k.shape == (3, Hkv, 32, 8) for c in caches)
    assert sum(c.nbytes for c in caches) == grouped_cache_bytes(
        m.config, 32, B=3)
    x = idx(B=3, T=17)
    full = m(x)[0]
    step = torch.cat([m(x[:, :9], caches=caches)[0]] + [
        m(x[:, t:t + 1], start_pos=t, caches=caches)[0]
        for t in range(9, 17)], dim=1)
    torch.testing.assert_close(step, full, rtol=0, atol=1e-5)
    p = idx(B=1, T=5)
    assert torch.equal(generate(m, p, 20, temperature=0),
                       generate(m, p, 20, temperature=0, use_cache=False))


def test_keys_and_values_are_not_copied():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 6, 5, 4, generator=g)
    k, v = (torch.randn(1, 2, 5, 4, generator=g) for _ in range(2))
    seen = []

    def fn(a, b, c):
        seen.append((b.data_ptr(), c.data_ptr(), b.stride(), c.stride()))
        return attention(a, b, c)[0]
    out = grouped_heads(fn, q, k, v)
    assert seen == [(k.data_ptr(), v.data_ptr(), k.stride(), v.stride())] * 3
    ref = attention(q, torch.repeat_interleave(k, 3, 1),
                    torch.repeat_interleave(v, 3, 1))[0]
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("Hkv", [1, 2, 4])
def test_grouped_decode_is_one_call_equal_to_the_slices(Hkv, monkeypatch):
    """Move 5: one decoding step in one attention call (each stored key
    read once), equal to the g slices of move 4 and to SDPA with
    enable_gqa."""
    import transformer.grouped as grouped_module
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 1, 8, generator=g)  # (B, H, 1, Dh)
    k, v = (torch.randn(2, Hkv, 13, 8, generator=g) for _ in range(2))
    calls = []
    real = grouped_module.softmax_rows_
    monkeypatch.setattr(grouped_module, "softmax_rows_",
                        lambda p: calls.append(p.shape) or real(p))
    out = grouped_decode(q, k, v)
    assert calls == [(2, Hkv, 4 // Hkv, 13)]  # one softmax: all heads
    ref = grouped_heads(lambda a, b, c: attention(a, b, c)[0], q, k, v)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
    sdpa = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, sdpa, rtol=0, atol=1e-5)


def test_grouped_decode_rejects_more_than_one_query():
    q, k = torch.zeros(1, 4, 2, 8), torch.zeros(1, 2, 5, 8)
    with pytest.raises(ValueError, match="q: expected one query position"):
        grouped_decode(q, k, k)
    with pytest.raises(ValueError, match="k: expected a number of heads"):
        grouped_decode(q[:, :, :1], torch.zeros(1, 3, 5, 8),
                       torch.zeros(1, 3, 5, 8))


def test_grouped_decode_has_gradients_equal_to_the_slices():
    """A one-position forward with gradients (a grouped model trained or
    probed on single tokens) goes through grouped_decode too: its gradients
    equal move 4's slices'."""
    g = torch.Generator().manual_seed(1)
    q0 = torch.randn(2, 4, 1, 8, generator=g)
    k0, v0 = (torch.randn(2, 2, 9, 8, generator=g) for _ in range(2))
    grads = []
    for run in (lambda q, k, v: grouped_decode(q, k, v),
                lambda q, k, v: grouped_heads(
                    lambda a, b, c: attention(a, b, c)[0], q, k, v)):
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        (run(q, k, v) ** 2).sum().backward()
        grads.append([t.grad for t in (q, k, v)])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    m = model(n_kv_head=1)
    m(idx(T=1))[0].sum().backward()  # the model's path, one token
    assert all(p.grad is not None for p in m.parameters()
               if p.requires_grad and p.dim() > 1)


@pytest.mark.parametrize("fused", [True, False])
def test_grouped_model_decodes_like_recompute_on_both_kernels(fused):
    m = model(n_kv_head=1, pos_encoding="rope", fused=fused)
    x = idx(B=2, T=12)
    caches = make_caches(m, 2, 12)
    step = torch.cat([m(x[:, :4], caches=caches)[0]] + [
        m(x[:, t:t + 1], start_pos=t, caches=caches)[0]
        for t in range(4, 12)], dim=1)
    torch.testing.assert_close(step, m(x)[0], rtol=0, atol=1e-5)


def test_param_count_follows_kv_heads():
    for Hkv in (1, 2, 4):
        for bias in (True, False):
            m = model(n_kv_head=Hkv, bias=bias)
            assert m.n_params() == gpt_param_count(m.config)


@pytest.mark.parametrize("Hkv", [1, 2, 4])
def test_cost_model_counts_kv_heads(Hkv):
    """Chapter 10's cost model follows n_kv_head: its places add up to the
    parameters the model holds, its cache bytes are the bytes a cache holds,
    and a decode step reads exactly those bytes beyond the weights."""
    from transformer.cost_model import kv_cache_bytes, param_breakdown
    from transformer.kv_cache import decode_step_bytes
    m = model(n_kv_head=Hkv, pos_encoding="rope")
    assert param_breakdown(m.config)["total"] == m.n_params()
    caches = make_caches(m, 2, 24)
    held = sum(c.nbytes for c in caches)
    assert kv_cache_bytes(24, 2, m.config) == held
    assert decode_step_bytes(m.config, 24, B=2)["cache"] == held


@pytest.mark.parametrize("bad", [3, 0, -2, 8, True, 2.0, "2"])
def test_rejects_bad_n_kv_head(bad):
    with pytest.raises(ValueError, match="^n_kv_head:"):
        dataclasses.replace(BASE, n_kv_head=bad)


def test_grouped_heads_rejects_non_divisor():
    q = torch.randn(1, 4, 3, 8)
    k = torch.randn(1, 3, 3, 8)
    with pytest.raises(ValueError, match="^k:"):
        grouped_attention(q, k, k)


def test_save_hf_refuses_grouped(tmp_path):
    with pytest.raises(ValueError, match="^config.n_kv_head:"):
        save_hf_gpt2(model(n_kv_head=2), tmp_path)
    save_hf_gpt2(model(n_kv_head=4), tmp_path)  # = n_head: plain GPT-2


def test_mean_pool_kv_is_exact_when_a_group_shares_its_heads():
    """Ainslie et al.'s conversion: with n_kv_head = n_head it returns the
    same model; when the heads of each group already share their key and
    value projections, the pooled grouped model computes the same logits
    (1e-6); what is not a divisor, or a model already grouped, is a
    ValueError naming the argument."""
    import dataclasses
    from transformer.grouped import mean_pool_kv
    from transformer.model import GPT, GPTConfig
    cfg = GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=4,
                    n_embd=32)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    x = torch.randint(0, 32, (2, 16))
    with torch.no_grad():
        assert torch.equal(mean_pool_kv(model, 4)(x)[0], model(x)[0])
        D, Dh = cfg.n_embd, cfg.head_dim
        for block in model.blocks:  # heads 0, 1 share; 2, 3 share
            for t in (block.attn.c_attn.weight, block.attn.c_attn.bias):
                for part in (1, 2):  # keys, values
                    for h in (1, 3):
                        lo = part * D + h * Dh
                        t[..., lo:lo + Dh] = t[..., lo - Dh:lo]
        pooled = mean_pool_kv(model, 2)
        assert pooled.config.kv_heads == 2
        torch.testing.assert_close(pooled(x)[0], model(x)[0], rtol=0,
                                   atol=1e-6)
        moved = mean_pool_kv(model, 1)(x)[0]  # 2 distinct groups: changes
        assert (moved - model(x)[0]).abs().max() > 1e-3
    for bad in (3, 0, True, 2.0):
        with pytest.raises(ValueError, match="n_kv_head: expected a "
                                             "divisor"):
            mean_pool_kv(model, bad)
    grouped = GPT(dataclasses.replace(cfg, n_kv_head=2))
    with pytest.raises(ValueError, match="model: expected a multi-head"):
        mean_pool_kv(grouped, 1)
