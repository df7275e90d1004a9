"""Chapter "Multi-head attention, the block and the GPT model": the causal
leak test (with its mutation check), a float64 finite-difference gradient
check, Hugging Face GPT-2 as the oracle, and the parameter-count formula."""
import dataclasses
import itertools
import math

import pytest
import torch

import literate  # tools/, put on sys.path by the root conftest.py
from transformer import CausalSelfAttention, GPTConfig, gpt_param_count
from transformer.model import GPT

POS = ["learned", "sinusoidal", "rope", "none"]


def tiny(**kw):
    base = dict(vocab_size=13, block_size=16, n_layer=2, n_head=2, n_embd=8)
    base.update(kw)
    return GPTConfig(**base)


def ids(B, T, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g)


def test_hand_computed_block_attention():
    """The attention chapter's worked example through the module: W = I."""
    cfg = GPTConfig(vocab_size=5, block_size=3, n_layer=1, n_head=1, n_embd=4)
    attn = CausalSelfAttention(cfg)
    with torch.no_grad():
        attn.c_attn.weight.copy_(torch.cat([torch.eye(4)] * 3, dim=1))
        attn.c_attn.bias.zero_()
        attn.c_proj.weight.copy_(torch.eye(4))
        attn.c_proj.bias.zero_()
    x = torch.tensor([[[2.0, 2, 0, 0], [1, 1, 0, 0], [0, 0, 2, 0]]])
    e = math.e
    w = torch.tensor([[1.0, 0, 0],
                      [1 / (1 + 1 / e), (1 / e) / (1 + 1 / e), 0],
                      [1 / (2 + e**2), 1 / (2 + e**2), e**2 / (2 + e**2)]])
    torch.testing.assert_close(attn(x)[0], w @ x[0], rtol=0, atol=1e-6)


def _no_leak(cfg, seed=0):
    """Property 2: perturbing token t+1 leaves logits at <= t bit-identical."""
    torch.manual_seed(seed)
    model = GPT(cfg).eval()
    B, T = 2, 10
    idx = ids(B, T, cfg.vocab_size, seed)
    with torch.no_grad():
        logits, _ = model(idx)
        for t in range(T - 1):
            idx2 = idx.clone()
            idx2[:, t + 1] = (idx2[:, t + 1] + 1) % cfg.vocab_size
            logits2, _ = model(idx2)
            if not torch.equal(logits[:, :t + 1], logits2[:, :t + 1]):
                return False
            if torch.equal(logits[:, t + 1], logits2[:, t + 1]):
                return False  # the perturbation must matter where allowed
    return True


@pytest.mark.parametrize("pos,norm_position,norm", [
    (p, np_, n) for p, np_ in itertools.product(POS, ["pre", "post"])
    for n in ["layernorm", "rmsnorm"]])
def test_causal_leak(pos, norm_position, norm):
    assert _no_leak(tiny(pos_encoding=pos, norm_position=norm_position,
                         norm=norm, n_layer=3))


def test_mask_after_softmax_leaks():
    # the training chapter's mutant patches both attention paths
    mask_after_softmax = literate.chapter_definition("09_training",
                                                     "mask_after_softmax")
    for fused in (False, True):
        cfg = tiny(fused=fused)
        assert _no_leak(cfg)
    with mask_after_softmax():
        for fused in (False, True):
            assert not _no_leak(tiny(fused=fused))
    for fused in (False, True):  # and the patch is undone
        assert _no_leak(tiny(fused=fused))


def _grad_check(cfg, seed=0, eps=1e-6):
    """Central differences vs autograd for every entry of every parameter
    tensor, in float64; returns {name: relative error}."""
    torch.manual_seed(seed)
    model = GPT(cfg).double().eval()
    with torch.no_grad():  # move every parameter off its init value
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    idx = ids(2, 6, cfg.vocab_size, seed)
    targets = ids(2, 6, cfg.vocab_size, seed + 1)
    _, loss = model(idx, targets)
    loss.backward()
    errors = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            fd = torch.zeros_like(p).view(-1)
            flat = p.view(-1)
            for i in range(flat.numel()):
                old = flat[i].item()
                flat[i] = old + eps
                up = model(idx, targets)[1].item()
                flat[i] = old - eps
                down = model(idx, targets)[1].item()
                flat[i] = old
                fd[i] = (up - down) / (2 * eps)
            auto = p.grad.view(-1)
            errors[name] = ((fd - auto).norm()
                            / max(auto.norm(), fd.norm(), 1e-300)).item()
    return errors


@pytest.mark.parametrize("cfg", [
    tiny(n_embd=4, n_head=2, vocab_size=7, block_size=6),
    tiny(n_embd=4, n_head=1, vocab_size=7, norm="rmsnorm",
         norm_position="post", pos_encoding="rope", bias=False,
         tie_weights=False),
    tiny(n_embd=4, n_head=2, vocab_size=7, pos_encoding="sinusoidal",
         norm_position="post", ffn_mult=2),
], ids=["gpt2-like", "rmsnorm-post-rope-untied", "sinusoidal-post"])
def test_gradient_check(cfg):
    errors = _grad_check(cfg)
    assert len(errors) == len(list(GPT(cfg).parameters()))
    bad = {k: v for k, v in errors.items() if not v < 1e-4}
    assert not bad, bad


HF_CONFIGS = [
    dict(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2),
    dict(vocab_size=101, n_positions=32, n_embd=48, n_layer=3, n_head=4),
    dict(vocab_size=77, n_positions=24, n_embd=32, n_layer=2, n_head=8,
         n_inner=48),
    dict(vocab_size=64, n_positions=20, n_embd=24, n_layer=4, n_head=3,
         layer_norm_epsilon=1e-3),
]


@pytest.mark.parametrize("hf_kwargs", HF_CONFIGS)
def test_matches_hf_gpt2(hf_kwargs):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(**hf_kwargs,
                                    attn_implementation="eager")).eval()
    with torch.no_grad():  # biases and norm gains off 0 and 1
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ours = GPT.from_hf_gpt2(hf).eval()
    assert ours.n_params() == sum(p.numel() for p in hf.parameters())
    T = hf_kwargs["n_positions"]
    idx = ids(3, T, hf_kwargs["vocab_size"])
    targets = ids(3, T, hf_kwargs["vocab_size"], seed=1)
    with torch.no_grad():
        logits, loss = ours(idx, targets)
        ref = hf(idx, labels=idx)
    torch.testing.assert_close(logits, ref.logits, rtol=0, atol=1e-5)
    # HF's loss shifts labels internally; ours takes targets directly
    shifted = torch.nn.functional.cross_entropy(
        ref.logits[:, :-1].reshape(-1, ref.logits.shape[-1]),
        idx[:, 1:].reshape(-1))
    _, our_shifted = ours(idx[:, :-1], idx[:, 1:])
    torch.testing.assert_close(our_shifted, shifted, rtol=0, atol=1e-5)
    torch.testing.assert_close(ref.loss, shifted, rtol=0, atol=1e-6)
    assert loss is not None and loss.shape == ()


def test_from_hf_gpt2_rejects_other_activations():
    from transformers import GPT2Config, GPT2LMHeadModel
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=10, n_positions=8, n_embd=8,
                                    n_layer=1, n_head=2,
                                    activation_function="relu"))
    with pytest.raises(ValueError, match="hf_model"):
        GPT.from_hf_gpt2(hf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("pos", POS)
def test_shapes_and_dtypes(dtype, pos):
    cfg = tiny(pos_encoding=pos)
    model = GPT(cfg).to(dtype)
    B, T, D = 3, 7, cfg.n_embd
    x = torch.randn(B, T, D, dtype=dtype)
    block = model.blocks[0]
    for module in (block.ln_1, block.attn, block.mlp, block):
        y = module(x)
        assert y.shape == (B, T, D) and y.dtype == dtype
    idx = ids(B, T, cfg.vocab_size)
    logits, loss = model(idx)
    assert logits.shape == (B, T, cfg.vocab_size) and logits.dtype == dtype
    assert loss is None
    logits, loss = model(idx, ids(B, T, cfg.vocab_size, 1))
    assert loss.shape == () and loss.dtype == dtype
    # a single position, and a batch of one
    assert model(idx[:1, :1])[0].shape == (1, 1, cfg.vocab_size)


@pytest.mark.parametrize("kw", [
    dict(), dict(norm="rmsnorm", bias=False), dict(tie_weights=False),
    dict(pos_encoding="rope", norm_position="post"),
    dict(pos_encoding="sinusoidal", ffn_mult=2.5, n_embd=16),
    dict(pos_encoding="none", n_layer=5, n_head=4, n_embd=16)])
def test_param_count(kw):
    cfg = tiny(**kw)
    model = GPT(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert n == gpt_param_count(cfg) == model.n_params()
    non_emb = n - cfg.vocab_size * cfg.n_embd - (
        cfg.block_size * cfg.n_embd if cfg.pos_encoding == "learned" else 0)
    assert model.n_params(non_embedding=True) == non_emb


def test_gpt2_small_count():
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12,
                    n_embd=768)
    assert gpt_param_count(cfg) == 124_439_808


def test_weight_tying():
    tied, untied = GPT(tiny()), GPT(tiny(tie_weights=False))
    assert tied.lm_head.weight is tied.wte.weight
    assert untied.lm_head.weight is not untied.wte.weight
    assert untied.n_params() - tied.n_params() == 13 * 8


def test_decode_unembedding_copy_follows_the_table():
    """A decode call (no grad, a few positions) multiplies by a (D, V) copy
    of the tied table: the same logits as lm_head within float32 rounding,
    and a changed table (in place, or loaded) is never served stale."""
    import transformer.model as M
    cfg = GPTConfig(vocab_size=300, block_size=16, n_layer=1, n_head=2,
                    n_embd=32)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    idx = torch.randint(0, 300, (1, 1))
    h = torch.randn(1, 1, 32)
    with torch.no_grad():
        ref = model.lm_head(h)
        torch.testing.assert_close(M._unembed(model, h), ref, rtol=0,
                                   atol=1e-5)
        assert "_unembed_dv" in model.__dict__  # the copy was made
        model.wte.weight.mul_(2.0)  # in place: the version counter moves
        torch.testing.assert_close(M._unembed(model, h), 2 * ref, rtol=0,
                                   atol=1e-5)
        other = GPT(cfg).eval()
        model.load_state_dict(other.state_dict())
        torch.testing.assert_close(model(idx)[0], other(idx)[0], rtol=0,
                                   atol=1e-5)
    # with autograd on, or more than a few positions, lm_head itself
    assert torch.equal(M._unembed(model, h), model.lm_head(h))
    with torch.no_grad():
        wide = torch.randn(1, M._MAX_DECODE_POSITIONS + 1, 32)
        assert torch.equal(M._unembed(model, wide), model.lm_head(wide))

def test_heads_cost_the_same():
    counts = {sum(p.numel() for p in CausalSelfAttention(
        tiny(n_embd=32, n_head=h)).parameters()) for h in (1, 2, 4, 8, 16)}
    assert counts == {4 * 32 * 32 + 4 * 32}


class ListCache:
    """The smallest object satisfying the cache protocol of the model."""

    def __init__(self):
        self.k = self.v = None

    def update(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v


@pytest.mark.parametrize("pos", POS)
def test_cache_and_offset(pos):
    cfg = tiny(pos_encoding=pos, n_layer=3)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    idx = ids(2, 9, cfg.vocab_size)
    with torch.no_grad():
        full, _ = model(idx)
        caches = [ListCache() for _ in range(cfg.n_layer)]
        steps = [model(idx[:, :4], caches=caches)[0]]
        for t in range(4, 9):
            steps.append(model(idx[:, t:t + 1], start_pos=t,
                               caches=caches)[0])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0,
                               atol=1e-5)


def test_rope_model_translation_invariant():
    """With RoPE and nothing else, shifting every position changes nothing."""
    torch.manual_seed(0)
    model = GPT(tiny(pos_encoding="rope")).eval()
    idx = ids(2, 8, 13)
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(idx, start_pos=500)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kw,arg", [
    (dict(n_embd=10, n_head=4), "n_embd"),
    (dict(n_embd=6, n_head=2, pos_encoding="rope"), "n_head"),
    (dict(n_embd=6, n_head=6, pos_encoding="sinusoidal", n_layer=1),
     None),
    (dict(n_embd=5, n_head=5, pos_encoding="sinusoidal"), "n_embd"),
    (dict(norm="batchnorm"), "norm"),
    (dict(norm_position="middle"), "norm_position"),
    (dict(pos_encoding="alibi"), "pos_encoding"),
    (dict(n_layer=0), "n_layer"),
    (dict(vocab_size=2.5), "vocab_size"),
    (dict(dropout=1.0), "dropout"),
    (dict(ffn_mult=0.3), "ffn_mult"),
    (dict(rope_base=-1.0), "rope_base"),
    (dict(bias=1), "bias"),
    (dict(norm_eps=0.0), "norm_eps"),
])
def test_config_errors(kw, arg):
    if arg is None:
        tiny(**kw)  # valid: an even width with odd heads is fine here
        return
    with pytest.raises(ValueError, match=arg):
        tiny(**kw)


def test_bad_input():
    model = GPT(tiny())
    with pytest.raises(ValueError, match="idx"):
        model(ids(1, 17, 13))  # longer than block_size, learned positions
    with pytest.raises(ValueError, match="idx"):
        model(torch.tensor([[0, 13]]))  # out of the vocabulary
    with pytest.raises(ValueError, match="idx"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="idx"):
        model(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="idx"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="targets"):
        model(ids(1, 4, 13), targets=ids(1, 3, 13))
    with pytest.raises(ValueError, match="config"):
        GPT(dict(vocab_size=3))
    # positions without a table have no length limit
    assert GPT(tiny(pos_encoding="rope"))(ids(1, 40, 13))[0].shape[1] == 40


def test_config_is_frozen_and_replace_checks():
    import dataclasses
    cfg = tiny()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_head = 3
    assert dataclasses.replace(cfg, n_head=4).head_dim == 2
    with pytest.raises(ValueError, match="n_embd"):
        dataclasses.replace(cfg, n_head=3)


@pytest.mark.parametrize("fused", [False, True])
def test_post_norm_matches_torch_encoder_layer(fused):
    """Post-norm has no GPT-2 to compare with; PyTorch's own
    nn.TransformerEncoderLayer(norm_first=False) is the oracle: each of
    our post-norm blocks, given its weights, must compute the same as
    that layer with a causal mask (tanh GELU, no dropout)."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=11, block_size=8, n_layer=3, n_head=2,
                    n_embd=16, norm_position="post", pos_encoding="none",
                    fused=fused)
    model = GPT(cfg).eval()
    with torch.no_grad():  # move biases and gains off 0 and 1
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    x = torch.randn(2, 8, 16)  # (B, T, D)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(8)
    ref = x
    for block in model.blocks:
        layer = torch.nn.TransformerEncoderLayer(
            16, 2, dim_feedforward=64, dropout=0.0, batch_first=True,
            norm_first=False, activation=lambda h: F.gelu(
                h, approximate="tanh")).eval()
        a, m = block.attn, block.mlp
        with torch.no_grad():  # ours store (in, out); torch (out, in)
            layer.self_attn.in_proj_weight.copy_(a.c_attn.weight.T)
            layer.self_attn.in_proj_bias.copy_(a.c_attn.bias)
            layer.self_attn.out_proj.weight.copy_(a.c_proj.weight.T)
            layer.self_attn.out_proj.bias.copy_(a.c_proj.bias)
            layer.linear1.weight.copy_(m.c_fc.weight.T)
            layer.linear1.bias.copy_(m.c_fc.bias)
            layer.linear2.weight.copy_(m.c_proj.weight.T)
            layer.linear2.bias.copy_(m.c_proj.bias)
            for ours, theirs in ((block.ln_1, layer.norm1),
                                 (block.ln_2, layer.norm2)):
                theirs.weight.copy_(ours.weight)
                theirs.bias.copy_(ours.bias)
        with torch.no_grad():
            ref = layer(ref, src_mask=mask, is_causal=True)
            x = block(x)
        torch.testing.assert_close(x, ref, rtol=0, atol=2e-5)


def test_compiled_model_equals_eager_and_checks_eagerly():
    """compile_model: the same loss and gradients as the eager model (fused
    kernels, float32 rounding apart), and the same ValueErrors for bad ids
    and targets, raised before anything is compiled or run."""
    from transformer.model import compile_model
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=32, n_layer=1, n_head=2,
                    n_embd=32, fused=True)
    model = GPT(cfg)
    x = torch.randint(0, 64, (2, 32))  # (B, T)
    y = torch.randint(0, 64, (2, 32))  # (B, T)
    run = compile_model(model)
    for bad_idx, bad_targets, name in ((x + 64, y, "idx"),
                                       (x, y - 64, "targets"),
                                       (x, y[:, :5], "targets"),
                                       (x.float(), y, "idx")):
        with pytest.raises(ValueError, match=name):
            run(bad_idx, bad_targets)
    _, loss_c = run(x, y)
    loss_c.backward()
    grads_c = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    _, loss_e = model(x, y)
    loss_e.backward()
    assert abs(loss_c.item() - loss_e.item()) < 1e-5
    for gc, p in zip(grads_c, model.parameters()):
        torch.testing.assert_close(gc, p.grad, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="model"):
        compile_model(model.blocks[0])


def test_deepnorm_matches_its_equation_on_one_block():
    """Eq. (eq-deepnorm) by hand for one block: LN(alpha x + MHA(x)), then
    LN(alpha x' + FFN(x')), alpha = (2L)^(1/4); and beta's init gains."""
    from transformer.model import deepnorm_alpha_beta
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, block_size=8, n_layer=8, n_head=2,
                    n_embd=16, norm_position="deepnorm", fused=False)
    m = GPT(cfg)
    a, b = deepnorm_alpha_beta(8)
    assert a == pytest.approx(16 ** 0.25) and b == pytest.approx(64 ** -0.25)
    blk = m.blocks[0]
    x = torch.randn(2, 8, 16)
    ln = torch.nn.functional.layer_norm  # the oracle: PyTorch's own norm
    x1 = ln(a * x + blk.attn(x), (16,), blk.ln_1.weight, blk.ln_1.bias)
    want = ln(a * x1 + blk.mlp(x1), (16,), blk.ln_2.weight, blk.ln_2.bias)
    torch.testing.assert_close(blk(x), want, rtol=1e-5, atol=1e-5)
    # beta-scaled Xavier: W_V and the FFN at gain beta, W_Q at gain 1
    big = GPT(GPTConfig(vocab_size=50, block_size=8, n_layer=8, n_head=4,
                        n_embd=256, norm_position="deepnorm"))
    w = big.blocks[0].attn.c_attn.weight.detach()
    xav = (2 / 512) ** 0.5
    assert w[:, :256].std().item() == pytest.approx(xav, rel=0.05)
    assert w[:, 512:].std().item() == pytest.approx(b * xav, rel=0.05)
    fc = big.blocks[0].mlp.c_fc.weight.detach()
    assert fc.std().item() == pytest.approx(b * (2 / (256 + 1024)) ** 0.5,
                                            rel=0.05)


def test_embed_scale_multiplies_the_token_embeddings_by_sqrt_d():
    torch.manual_seed(0)
    base = GPTConfig(vocab_size=50, block_size=8, n_layer=1, n_head=2,
                     n_embd=16, norm_position="post", pos_encoding="none",
                     tie_weights=False)
    m1 = GPT(base)
    m2 = GPT(dataclasses.replace(base, embed_scale="sqrt_d"))
    m2.load_state_dict(m1.state_dict())
    idx = torch.randint(0, 50, (2, 8))
    with torch.no_grad():
        m1.wte.weight.mul_(4.0)  # sqrt(16): the same first-block input
    torch.testing.assert_close(m1(idx)[0], m2(idx)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="embed_scale"):
        dataclasses.replace(base, embed_scale="sqrt")
