"""Chapter "Data, the bigram baseline and the entropy floor"."""
import math

import pytest
import torch

from transformer.baseline import (BigramLM, bigram_counts, bigram_loss,
                                  compressed_bits_per_byte, get_batch,
                                  unigram_loss)


def test_get_batch():
    ids = torch.arange(100)
    g1, g2 = (torch.Generator().manual_seed(3) for _ in range(2))
    x, y = get_batch(ids, 8, 10, generator=g1)
    assert x.shape == y.shape == (8, 10) and x.dtype == torch.int64
    torch.testing.assert_close(y, x + 1, rtol=0, atol=0)  # shifted by one
    x2, y2 = get_batch(ids, 8, 10, generator=g2)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    # every full window is reachable, including the last one
    starts = set()
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        x, _ = get_batch(torch.arange(12), 4, 10, generator=g)
        starts.update(x[:, 0].tolist())
    assert starts == {0, 1}


def test_bigram_worked_example():
    counts = bigram_counts(torch.tensor([0, 1, 0, 1, 0, 2]), 3)
    assert counts.tolist() == [[0, 2, 1], [2, 0, 0], [0, 0, 0]]
    assert bigram_loss(counts, torch.tensor([0, 1]), 1.0) == \
        pytest.approx(math.log(2), abs=1e-12)
    # an unseen context gets the uniform distribution
    assert bigram_loss(counts, torch.tensor([2, 0]), 1.0) == \
        pytest.approx(math.log(3), abs=1e-12)


def test_bigram_loss_matches_direct_formula():
    g = torch.Generator().manual_seed(1)
    train = torch.randint(0, 7, (500,), generator=g)
    held = torch.randint(0, 7, (60,), generator=g)
    counts = bigram_counts(train, 7)
    assert counts.sum() == 499
    for alpha in (0.01, 0.5, 2.0):
        direct = 0.0
        for a, b in zip(held[:-1].tolist(), held[1:].tolist()):
            pairs = sum(1 for s, t in zip(train[:-1].tolist(),
                                          train[1:].tolist()) if s == a)
            hits = sum(1 for s, t in zip(train[:-1].tolist(),
                                         train[1:].tolist())
                       if s == a and t == b)
            direct -= math.log((hits + alpha) / (pairs + alpha * 7))
        assert bigram_loss(counts, held, alpha) == pytest.approx(
            direct / 59, abs=1e-12)


def test_unigram_loss():
    train = torch.tensor([0, 0, 1, 1])
    assert unigram_loss(train, torch.tensor([0, 1]), 4, alpha=1.0) == \
        pytest.approx(-math.log(3 / 8), abs=1e-12)


def test_count_loss_equals_stream_loss():
    torch.manual_seed(0)
    model = BigramLM(11)
    torch.nn.init.normal_(model.logits.weight)
    ids = torch.randint(0, 11, (300,))
    _, loss = model(ids[:-1].view(1, -1), ids[1:].view(1, -1))
    torch.testing.assert_close(model.count_loss(bigram_counts(ids, 11)),
                               loss, rtol=0, atol=1e-6)
    logits, none = model(ids[:5].view(1, -1))
    assert logits.shape == (1, 5, 11) and none is None


def test_zero_init_gives_uniform_loss():
    model = BigramLM(50)
    _, loss = model(torch.zeros(2, 3, dtype=torch.long),
                    torch.ones(2, 3, dtype=torch.long))
    assert abs(loss.item() - math.log(50)) < 1e-6


def test_compression_bound():
    text = ("to be or not to be that is the question " * 50).encode()
    alone = compressed_bits_per_byte(text)
    given = compressed_bits_per_byte(text, context=text)
    assert 0 <= given < alone < 8


def test_bad_input():
    with pytest.raises(ValueError, match="block_size"):
        get_batch(torch.arange(5), 2, 5)
    with pytest.raises(ValueError, match="batch_size"):
        get_batch(torch.arange(5), 0, 2)
    with pytest.raises(ValueError, match="ids"):
        get_batch([1, 2, 3], 1, 1)
    with pytest.raises(ValueError, match="alpha"):
        bigram_loss(torch.zeros(3, 3), torch.tensor([0, 1]), 0.0)
    with pytest.raises(ValueError, match="ids"):
        bigram_counts(torch.tensor([0, 5]), 3)
    with pytest.raises(ValueError, match="idx"):
        BigramLM(3)(torch.tensor([[0, 3]]))
    with pytest.raises(ValueError, match="data"):
        compressed_bits_per_byte(b"")
