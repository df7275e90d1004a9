"""Many models at once (chapter "Backward passes by hand", section "Many
models at once"): K models trained as one stacked computation against each
model trained alone by training's `train`, bit-identity where it is
promised, and one model's divergence kept out of the others' numbers.

Why equality is to 1e-5 and not bitwise: the stacked step multiplies
(K, B T, D_in) blocks with one batched product where the single step
multiplies (B T, D_in) matrices, the norms apply their gains as a separate
pass, and the matrix library picks its blocking, and so the order in which
it adds the terms of each sum, by shape. The sums are the same; their
rounding is not."""
import dataclasses
import math

import pytest
import torch

from transformer.model import GPTConfig
from transformer.optim import clip_grad_norm
from transformer.sweep import (StackedGPT, clip_per_model, shape_key,
                               train_many)
from transformer.training import TrainConfig, init_model, train



def _markov_bytes(n: int = 24000, seed: int = 0) -> torch.Tensor:
    """Text with structure, no network and no dependence on any file in
    the repository (the package's own source, used before, changed the
    data, and with it the rounding these tests bound, at every edit): n
    bytes from an order-1 chain whose rows favour 4 successors of 64."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(64, 64, generator=g)  # (64, 64)
    top = logits.topk(4, dim=1).indices  # (64, 4)
    probs = torch.full((64, 64), 0.05 / 60).scatter_(1, top, 0.95 / 4)
    ids, state = [], 0
    u = torch.rand(n, generator=g)
    cdf = probs.cumsum(1)  # (64, 64)
    for i in range(n):
        state = min(int(torch.searchsorted(cdf[state], u[i])), 63)
        ids.append(32 + state)
    return torch.tensor(ids, dtype=torch.int64)


_IDS = _markov_bytes()
TRAIN_IDS, VAL_IDS = _IDS[:-4000], _IDS[-4000:]

# the runner's recipe (transformer.experiments.RECIPE) at a toy size
RECIPE = dict(eval_batches=2, eval_seed=1234, beta2=0.999,
              on_nonfinite="stop", checkpoint_interval=0)
TOY = dict(vocab_size=257, block_size=16, n_layer=2, n_head=2, n_embd=32)


def _runs(n=3, steps=20, **over):
    """n runs with their own seeds, learning rates and clipping."""
    lrs, clips = (3e-3, 1e-2, 3e-4, 2e-3), (1.0, 0.5, 0.1, 1.0)
    return [TrainConfig(steps=steps, batch_size=4, warmup_steps=3,
                        eval_interval=10, seed=s, lr=lrs[s],
                        grad_clip=clips[s], **{**RECIPE, **over})
            for s in range(n)]


@pytest.mark.parametrize("model", [
    {}, {"pos_encoding": "rope"},
    {"norm": "rmsnorm", "norm_position": "post"},
    {"bias": False, "tie_weights": False, "pos_encoding": "sinusoidal"},
    {"pos_encoding": "none", "attn_scale": False},
    {"pos_encoding": "sinusoidal-matched", "fused": False}])
def test_each_model_equals_its_single_run(model, one_thread):
    """The first 20 training losses (and the evaluations, gradient norms
    and schedules) of every stacked model equal its own `train` run's
    within 1e-5 nats in float32 (see the module docstring for why not
    bitwise)."""
    mc = GPTConfig(**TOY, **model)
    runs = _runs()
    stacked = train_many([(mc, c) for c in runs], TRAIN_IDS, VAL_IDS)
    for cfg, hist in zip(runs, stacked):
        alone = train(init_model(mc, cfg.seed), TRAIN_IDS, VAL_IDS, cfg)
        assert len(hist["train_loss"]) == len(alone["train_loss"]) == 20
        torch.testing.assert_close(hist["train_loss"], alone["train_loss"],
                                   rtol=0, atol=1e-5)
        torch.testing.assert_close(hist["val_loss"], alone["val_loss"],
                                   rtol=0, atol=1e-5)
        # the norm is a sum over every gradient, and without the score
        # scale (E1's arm) attention is sharp enough to amplify rounding
        # in it more than in the loss: 1e-3 relative
        torch.testing.assert_close(hist["grad_norm"], alone["grad_norm"],
                                   rtol=1e-3, atol=0)
        assert hist["lr"] == alone["lr"]  # the same schedule, exactly
        assert hist["val_steps"] == alone["val_steps"] == [0, 10, 20]
        assert set(alone) <= set(hist)  # every field `train` returns
        assert hist["models_batched"] == 3 and not hist["diverged"]


def test_trained_models_hold_their_weights(one_thread):
    """The models passed in end holding the weights the stacked run
    trained: their evaluation equals the run's last one."""
    from transformer.training import evaluate
    mc = GPTConfig(**TOY)
    runs = _runs(2, steps=10)
    models = [init_model(mc, c.seed) for c in runs]
    hists = train_many([(mc, c) for c in runs], TRAIN_IDS, VAL_IDS,
                       models=models)
    for m, c, h in zip(models, runs, hists):
        assert evaluate(m, VAL_IDS, 16, c.batch_size, c.eval_batches,
                        c.eval_seed) == h["val_loss"][-1]


def _strip(hist):
    """A history without its timings (the only fields that may differ
    between two identical runs)."""
    return {k: v for k, v in hist.items()
            if k not in ("train_s", "tokens_per_s", "wall_s", "cpu_s")}


def test_same_command_twice_is_bit_identical(one_thread):
    mc = GPTConfig(**TOY, pos_encoding="rope")
    runs = _runs(3, steps=12)
    first = train_many([(mc, c) for c in runs], TRAIN_IDS, VAL_IDS)
    second = train_many([(mc, c) for c in runs], TRAIN_IDS, VAL_IDS)
    assert [_strip(h) for h in first] == [_strip(h) for h in second]


@pytest.mark.parametrize("on_nonfinite", ["stop", "skip"])
def test_a_diverging_model_leaves_the_others_bit_identical(on_nonfinite,
                                                           one_thread):
    """Model 1 starts with an infinite weight, so its loss is nan from
    the first step. The other two models' losses, gradient norms,
    evaluations and final weights are bit-identical to the same run with
    model 1 healthy; model 1 stops, marked diverged ("stop"), or skips
    every update ("skip")."""
    mc = GPTConfig(**TOY)
    runs = _runs(3, steps=12, on_nonfinite=on_nonfinite)
    healthy = [init_model(mc, c.seed) for c in runs]
    sick = [init_model(mc, c.seed) for c in runs]
    with torch.no_grad():
        sick[1].blocks[0].mlp.c_fc.weight[0, 0] = math.inf
    base = train_many([(mc, c) for c in runs], TRAIN_IDS, VAL_IDS,
                      models=healthy)
    hurt = train_many([(mc, c) for c in runs], TRAIN_IDS, VAL_IDS,
                      models=sick)
    for k in (0, 2):
        assert _strip(hurt[k]) == _strip(base[k])
        for a, b in zip(healthy[k].parameters(), sick[k].parameters()):
            assert torch.equal(a, b)
    assert not math.isfinite(hurt[1]["train_loss"][0])
    # model 1 was never updated: its weights are its initial ones, bit for
    # bit (no nan from its gradient entered them or its moments)
    start = init_model(mc, runs[1].seed)
    with torch.no_grad():
        start.blocks[0].mlp.c_fc.weight[0, 0] = math.inf
    for a, b in zip(start.parameters(), sick[1].parameters()):
        assert torch.equal(a, b)
    if on_nonfinite == "stop":
        assert hurt[1]["diverged"] and len(hurt[1]["train_loss"]) == 1
        assert hurt[1]["val_steps"] == [0]  # no evaluation once broken
    else:
        assert not hurt[1]["diverged"] and hurt[1]["skipped_steps"] == 12
    assert not base[1]["diverged"] and base[1]["skipped_steps"] == 0


def test_models_of_different_lengths_stop_on_their_own(one_thread):
    """A model with fewer steps stops at its own end, with its own
    schedule; the longer one equals its run alone."""
    mc = GPTConfig(**TOY)
    runs = [dataclasses.replace(_runs(2)[0], steps=6, eval_interval=3),
            _runs(2, steps=10)[1]]
    hists = train_many([(mc, c) for c in runs], TRAIN_IDS, VAL_IDS)
    assert len(hists[0]["train_loss"]) == 6
    assert hists[0]["val_steps"] == [0, 3, 6]
    for cfg, hist in zip(runs, hists):
        alone = train(init_model(mc, cfg.seed), TRAIN_IDS, VAL_IDS, cfg)
        torch.testing.assert_close(hist["train_loss"], alone["train_loss"],
                                   rtol=0, atol=1e-5)


def test_clipping_is_per_model_and_equals_single_clipping():
    """clip_per_model on stacked gradients equals transformer.optim's
    clip_grad_norm on each model's own gradients: each model by its own
    global norm, a limit of 0 leaving a model unclipped, a non-finite
    norm leaving that model's gradients as they were."""
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 7), (7,), (3, 4, 2)]
    K, limits = 4, [0.5, 100.0, 0.0, 1.0]
    stacked = [torch.zeros(K, *s, requires_grad=True) for s in shapes]
    for p in stacked:
        p.grad = torch.randn(p.shape, generator=g) * 3
    with torch.no_grad():
        stacked[1].grad[3, 0] = math.nan  # model 3: a non-finite gradient
    singles = [[torch.zeros(s, requires_grad=True) for s in shapes]
               for _ in range(K)]
    for k, ps in enumerate(singles):
        for p, q in zip(ps, stacked):
            p.grad = q.grad[k].clone()
    norms = clip_per_model(stacked, limits)  # (K,)
    for k, ps in enumerate(singles):
        if limits[k] > 0:
            want = clip_grad_norm(ps, limits[k])
        else:  # no clipping: the norm alone
            want = torch.stack([p.grad.pow(2).sum() for p in ps]).sum().sqrt()
        if k == 3:
            assert not math.isfinite(norms[k]) and not math.isfinite(want)
        else:
            torch.testing.assert_close(norms[k], want, rtol=1e-6, atol=0)
        for p, q in zip(ps, stacked):
            torch.testing.assert_close(q.grad[k], p.grad, rtol=1e-6, atol=0,
                                       equal_nan=True)
    # model 0 was clipped to its limit, model 1 was not touched
    assert norms[0] > 0.5 and norms[1] < 100.0


def test_bad_groups_are_refused():
    mc = GPTConfig(**TOY)
    run = _runs(1)[0]
    with pytest.raises(ValueError, match="configs"):
        train_many([], TRAIN_IDS, VAL_IDS)
    with pytest.raises(ValueError, match="configs: expected one model"):
        train_many([(mc, run), (dataclasses.replace(mc, n_embd=64), run)],
                   TRAIN_IDS, VAL_IDS)
    with pytest.raises(ValueError, match="configs: expected one model"):
        train_many([(mc, run), (mc, dataclasses.replace(run, batch_size=8))],
                   TRAIN_IDS, VAL_IDS)
    with pytest.raises(ValueError, match="dropout"):
        StackedGPT([init_model(dataclasses.replace(mc, dropout=0.1), 0)])
    with pytest.raises(ValueError, match="models: expected one per"):
        train_many([(mc, run)], TRAIN_IDS, VAL_IDS,
                   models=[init_model(mc, 0)] * 2)
    # what may differ inside one group: the recipe, not the shape
    assert shape_key(mc, run) == shape_key(
        dataclasses.replace(mc, fused=False),
        dataclasses.replace(run, lr=1.0, seed=5, steps=3, warmup_steps=1))


def test_group_by_shape_groups_a_grid():
    """A grid's points split into stackable groups: equal shapes together,
    first-appearance order, at most max_models each; every point once."""
    from transformer.sweep import group_by_shape
    a, b = GPTConfig(**TOY), GPTConfig(**{**TOY, "n_layer": 3})
    run = _runs(1)[0]
    pts = [(a, run), (b, run), (a, dataclasses.replace(run, lr=1e-2)),
           (a, run), (b, run)]
    assert group_by_shape(pts) == [[0, 2, 3], [1, 4]]
    assert group_by_shape(pts, max_models=2) == [[0, 2], [3], [1, 4]]
    with pytest.raises(ValueError, match="max_models"):
        group_by_shape(pts, max_models=0)
