"""The interpolated n-gram reference (chapter "Data, the bigram baseline and
the entropy floor", section "A reference that counts context")."""
import itertools
import math

import pytest
import torch

from transformer.baseline import (bigram_alpha, bigram_counts, bigram_loss,
                                  get_batch, unigram_loss)
from transformer.ngram import (count_ngram, fit_ngram, ngram_probs,
                               ngram_references, ngram_stream_losses,
                               ngram_window_losses, reference_losses)


def markov_stream(n, V, seed, order=2):
    """A random order-`order` Markov chain over V tokens: rows of a random
    transition table with a few likely successors each."""
    g = torch.Generator().manual_seed(seed)
    table = torch.rand((V,) * order + (V,), generator=g) ** 6  # peaked rows
    table = table / table.sum(-1, keepdim=True)
    ids = list(torch.randint(0, V, (order,), generator=g).tolist())
    for _ in range(n - order):
        row = table[tuple(ids[-order:])]
        ids.append(torch.multinomial(row, 1, generator=g).item())
    return torch.tensor(ids, dtype=torch.int64)


def test_probabilities_sum_to_one_for_every_context():
    V = 5
    ids = markov_stream(600, V, seed=1)
    model = count_ngram(ids, V, [(3.0, 0.0), (0.3, 0.9), (1.0, 0.6),
                                 (10.0, 0.3)])
    n_ctx = 0
    for length in range(4):  # every context of 0..3 tokens, seen or not
        for ctx in itertools.product(range(V), repeat=length):
            p = ngram_probs(model, torch.tensor(ctx, dtype=torch.int64))
            assert p.shape == (V,) and p.dtype == torch.float64
            assert (p > 0).all()
            assert abs(p.sum().item() - 1) < 1e-12, ctx
            n_ctx += 1
    assert n_ctx == 1 + 5 + 25 + 125


def test_probabilities_sum_to_one_over_the_256_bytes():
    text = ("to be, or not to be, that is the question: whether 'tis "
            "nobler in the mind to suffer ").encode() * 3
    ids = torch.tensor(list(text), dtype=torch.int64)
    model = fit_ngram(ids, 257, order=5)
    for ctx in (b"", b"t", b"to b", b" the", b"\x00\xff\x10\x7f", b"zzzz"):
        p = ngram_probs(model, torch.tensor(list(ctx), dtype=torch.int64))
        assert p.shape == (257,)
        assert abs(p.sum().item() - 1) < 1e-12, ctx
        assert (p > 0).all()


@pytest.mark.parametrize("alpha", [1.0, 0.1])
def test_order_one_is_the_add_alpha_unigram(alpha):
    V = 11
    train, held = markov_stream(3000, V, 2), markov_stream(500, V, 3)
    model = count_ngram(train, V, [(alpha * V, 0.0)])
    got = ngram_stream_losses(model, held).mean().item()
    want = unigram_loss(train, held[1:], V, alpha)  # the same targets
    assert abs(got - want) < 1e-12


@pytest.mark.parametrize("alpha", [0.01, 0.1, 1.0])
def test_order_two_with_all_weight_on_the_bigram_is_the_counted_bigram(alpha):
    V = 11
    train, held = markov_stream(3000, V, 4), markov_stream(500, V, 5)
    model = count_ngram(train, V, [(math.inf, 0.0), (alpha * V, 0.0)])
    got = ngram_stream_losses(model, held).mean().item()
    want = bigram_loss(bigram_counts(train, V), held, alpha)
    assert abs(got - want) < 1e-12
    # and p(. | a) is eq. (eq-bigram) row by row
    c = bigram_counts(train, V).double()
    for a in range(V):
        p = ngram_probs(model, torch.tensor([a]))
        row = (c[a] + alpha) / (c[a].sum() + alpha * V)
        torch.testing.assert_close(p, row, rtol=0, atol=1e-14)


def test_development_loss_never_rises_with_order():
    V = 6
    ids = markov_stream(20000, V, seed=6, order=3)
    model = fit_ngram(ids, V, order=5)
    assert len(model.dev) == 5
    for lower, higher in zip(model.dev, model.dev[1:]):
        assert higher <= lower
    # the order-3 source: orders 2 and 3 help by a lot, order 3 most
    assert model.dev[2] < model.dev[1] - 0.1
    assert model.best_order >= 3


def test_dev_loss_is_the_stream_loss_of_the_truncations_on_the_last_tenth():
    V = 6
    ids = markov_stream(5000, V, seed=7)
    model = fit_ngram(ids, V, order=3)
    cut = int(0.9 * len(ids))
    fit = count_ngram(ids[:cut], V, model.params)
    every = ngram_stream_losses(fit, ids, every_order=True)  # (3, N - 1)
    for k in range(3):
        assert abs(every[k, cut - 1:].mean().item() - model.dev[k]) < 1e-12


def test_planted_trigram_is_exact():
    """Fibonacci mod 10: x_t = (x_{t-1} + x_{t-2}) mod 10 (period 60).
    Two tokens of context fix the next one; one token does not (a 3 is
    followed by several different digits)."""
    V = 10
    ids = [0, 1]
    for _ in range(7198):
        ids.append((ids[-1] + ids[-2]) % V)
    ids = torch.tensor(ids)
    train, held = ids[:6000], ids[6000:]
    # counted with (almost) no smoothing at order 3: exact
    exact = count_ngram(train, V, [(10.0, 0.0), (1.0, 0.0), (1e-9, 0.0)])
    losses = ngram_stream_losses(exact, held, every_order=True)  # (3, N - 1)
    assert (-losses[2][1:]).exp().min().item() > 1 - 1e-9  # from 2 tokens on
    assert losses[1].mean().item() > 0.5  # the bigram is ambiguous
    # the fitted model finds it: order 3 gets nearly all the weight
    model = fit_ngram(train, V, order=4)
    fitted = ngram_stream_losses(model, held, every_order=True)  # (4, N - 1)
    assert fitted[2][1:].mean().item() < 0.01
    assert model.dev[2] < 0.01 < 0.5 < model.dev[1]


def test_window_losses_see_only_their_own_window():
    V = 7
    ids = markov_stream(4000, V, seed=9)
    model = fit_ngram(ids[:3000], V, order=4)
    x, y = get_batch(ids[3000:], 8, 12, torch.Generator().manual_seed(0))
    got = ngram_window_losses(model, x, y)  # (8, 12)
    assert got.shape == (8, 12)
    for b in range(8):
        window = torch.cat([x[b, :1], y[b]])  # (13,) nothing before it
        torch.testing.assert_close(got[b], ngram_stream_losses(model, window),
                                   rtol=0, atol=0)
    # the first target reads one token, not the stream's four
    assert not torch.equal(got[:, :3], ngram_stream_losses(
        model, ids[3000:])[:3].expand(8, 3))


def test_reference_losses_on_given_targets():
    V = 9
    ids = markov_stream(8000, V, 10)  # one source: train and held-out
    train, held = ids[:6000], ids[6000:]
    refs = ngram_references(train, V, order=3)
    x, y = get_batch(held, 16, 10, torch.Generator().manual_seed(1))
    out = reference_losses(refs, x, y)
    alpha = bigram_alpha(train, V)[0]
    c = bigram_counts(train, V).double()
    direct_bigram = -((c[x, y] + alpha) / (c.sum(1)[x] + alpha * V)).log()
    assert abs(out["bigram"] - direct_bigram.mean().item()) < 1e-12
    uni = torch.bincount(train, minlength=V).double()
    direct_unigram = -((uni[y] + 1) / (uni.sum() + V)).log()
    assert abs(out["unigram"] - direct_unigram.mean().item()) < 1e-12
    assert out["n_targets"] == 160 and out["alpha"] == alpha
    assert out["ngram_order"] == refs["ngram"].best_order
    assert out["ngram"] < out["bigram"] < out["unigram"]


def test_bad_input():
    ids = markov_stream(200, 4, 12)
    with pytest.raises(ValueError, match="params"):
        count_ngram(ids, 4, [(0.0, 0.0)])
    with pytest.raises(ValueError, match="params"):
        count_ngram(ids, 4, [(1.0, 1.5)])
    with pytest.raises(ValueError, match="params"):
        count_ngram(ids, 4, [])
    with pytest.raises(ValueError, match="ids"):
        count_ngram(ids, 3, [(1.0, 0.0)])  # id 3 out of range
    with pytest.raises(ValueError, match="ids"):
        count_ngram(ids.float(), 4, [(1.0, 0.0)])
    model = count_ngram(ids, 4, [(1.0, 0.0), (1.0, 0.5)])
    with pytest.raises(ValueError, match="order"):
        ngram_stream_losses(model, ids, order=3)
    with pytest.raises(ValueError, match="ids"):
        ngram_stream_losses(model, torch.tensor([0, 1, 7]))
    x = ids[:10].view(2, 5)
    with pytest.raises(ValueError, match="y"):
        ngram_window_losses(model, x, x)
    with pytest.raises(ValueError, match="concentrations"):
        fit_ngram(ids, 4, order=2, concentrations=(1.0, 10.0))
    with pytest.raises(ValueError, match="overflows"):
        count_ngram(torch.arange(2, dtype=torch.int64), 2 ** 20,
                    [(1.0, 0.0)] * 4)
