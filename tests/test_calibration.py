"""Calibration: reliability bins, ECE and temperature fitting (chapter 14)."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer import (expected_calibration_error, fit_temperature,
                         nll_derivatives, reliability_bins, softmax,
                         temperature_nll, top1_confidence)


def test_worked_example():
    c = torch.tensor([0.2, 0.3, 0.4, 0.5, 0.6, 0.9], dtype=torch.float64)
    k = torch.tensor([False, True, True, False, False, True])
    bins = reliability_bins(c, k, n_bins=3)
    assert bins.count.tolist() == [2, 3, 1]
    torch.testing.assert_close(
        bins.confidence, torch.tensor([0.25, 0.5, 0.9], dtype=torch.float64),
        rtol=0, atol=1e-12)
    torch.testing.assert_close(
        bins.accuracy, torch.tensor([0.5, 1 / 3, 1.0], dtype=torch.float64),
        rtol=0, atol=1e-12)
    assert abs(expected_calibration_error(c, k, 3) - 1.1 / 6) < 1e-12
    # 0/1 integers and floats are accepted for `correct`, same answer
    assert abs(expected_calibration_error(c, k.long(), 3) - 1.1 / 6) < 1e-12
    # empty bins carry nan and do not count
    b10 = reliability_bins(c, k, n_bins=10)
    assert torch.isnan(b10.accuracy[0]) and b10.count[0] == 0
    assert math.isfinite(b10.ece)


def test_ece_zero_when_calibrated():
    # exactly calibrated: in each bin the share correct equals confidence
    c = torch.tensor([0.25] * 4 + [0.75] * 4, dtype=torch.float64)
    k = torch.tensor([1, 0, 0, 0, 1, 1, 1, 0], dtype=torch.bool)
    assert expected_calibration_error(c, k) == 0.0
    # one flip makes it positive: 1/8 of the predictions moved by 1
    k2 = k.clone()
    k2[1] = True
    assert abs(expected_calibration_error(c, k2) - 0.125) < 1e-12
    # coin flips with exactly the stated probability: ECE near 0, and far
    # below the ECE of the same confidences claimed one bin too high
    g = torch.Generator().manual_seed(0)
    c = torch.rand(200_000, generator=g, dtype=torch.float64)  # (N,)
    k = torch.rand(200_000, generator=g, dtype=torch.float64) < c  # (N,)
    assert expected_calibration_error(c, k) < 0.005
    off = (c + 0.1).clamp(max=1.0)
    assert expected_calibration_error(off, k) > 0.08


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 300), n_bins=st.integers(1, 40),
       seed=st.integers(0, 2**31 - 1))
def test_bins_partition(n, n_bins, seed):
    g = torch.Generator().manual_seed(seed)
    c = torch.rand(n, generator=g, dtype=torch.float64)  # (N,)
    c[0] = 1.0  # the closed right end belongs to the last bin
    k = torch.rand(n, generator=g) < 0.5  # (N,)
    bins = reliability_bins(c, k, n_bins)
    assert bins.count.sum().item() == n
    assert bins.count[-1] >= 1
    full = bins.count > 0
    lo, hi = bins.edges[:-1][full], bins.edges[1:][full]
    # a bin's mean confidence lies inside the bin
    assert (bins.confidence[full] >= lo).all()
    assert (bins.confidence[full] <= hi).all()
    assert 0.0 <= bins.ece <= 1.0


def test_derivatives_match_autograd():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(6, 4, 9, generator=g, dtype=torch.float64)  # (B, T, V)
    y = torch.randint(0, 9, (6, 4), generator=g)  # (B, T)
    for b0 in (0.3, 1.0, 2.5):
        beta = torch.tensor(b0, dtype=torch.float64, requires_grad=True)
        nll = -torch.log_softmax(beta * z, -1).gather(
            -1, y.unsqueeze(-1)).sum()
        (d1a,) = torch.autograd.grad(nll, beta, create_graph=True)
        (d2a,) = torch.autograd.grad(d1a, beta)
        n, d1, d2 = nll_derivatives(z, y, b0)
        assert n.shape == d1.shape == d2.shape == (6, 4)
        torch.testing.assert_close(n.sum(), nll.detach(), rtol=0, atol=1e-10)
        torch.testing.assert_close(d1.sum(), d1a.detach(), rtol=0,
                                   atol=1e-10)
        torch.testing.assert_close(d2.sum(), d2a, rtol=0, atol=1e-10)
        assert (d2 >= 0).all()
    assert abs(temperature_nll(z, y, 2.0)
               - nll_derivatives(z, y, 0.5)[0].mean().item()) < 1e-12


def _synthetic(k, seed, n=20_000, v=10):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, v, generator=g, dtype=torch.float64) * 1.5  # (N, V)
    y = torch.multinomial(softmax(z), 1, generator=g).squeeze(-1)  # (N,)
    return k * z, y


@pytest.mark.parametrize("k,seed", [(0.5, 0), (1.0, 1), (2.0, 2), (3.0, 3)])
def test_fit_recovers_temperature(k, seed):
    """Labels drawn from softmax(z), the model reports softmax(k z): the
    temperature that undoes it is k."""
    logits, y = _synthetic(k, seed)
    tau = fit_temperature(logits, y)
    assert abs(tau / k - 1) < 0.05, (k, tau)
    # it minimises the NLL: nudging it either way does not help
    best = temperature_nll(logits, y, tau)
    for f in (0.99, 1.01):
        assert temperature_nll(logits, y, tau * f) > best
    # and on held-out draws it beats leaving the logits alone when k != 1
    logits2, y2 = _synthetic(k, seed + 100)
    if k != 1.0:
        assert (temperature_nll(logits2, y2, tau)
                < temperature_nll(logits2, y2, 1.0))


def test_fit_matches_grid():
    logits, y = _synthetic(1.7, 5, n=3000, v=7)
    tau = fit_temperature(logits, y, lo=0.5, hi=5.0)
    grid = torch.linspace(0.5, 5.0, 4501, dtype=torch.float64)  # step 1e-3
    nll = torch.tensor([temperature_nll(logits, y, t.item()) for t in grid])
    assert abs(tau - grid[nll.argmin()].item()) < 1.5e-3
    # the derivative vanishes at the fitted value
    _, d1, _ = nll_derivatives(logits, y, 1 / tau)
    assert abs(d1.mean().item()) < 1e-8


def test_argmax_invariant():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(3, 5, 50, generator=g) * 4  # (B, T, V)
    y = torch.randint(0, 50, (3, 5), generator=g)  # (B, T)
    taus = [0.05, 0.3, 1.0, 1.7, 10.0]
    _, k_ref = top1_confidence(z, y)
    confs = []
    for t in taus:
        assert torch.equal(softmax(z, t).argmax(-1), z.argmax(-1))
        c, k = top1_confidence(z, y, t)
        assert c.shape == k.shape == (15,) and k.dtype == torch.bool
        assert torch.equal(k, k_ref)
        confs.append(c)
    confs = torch.stack(confs)  # (5, N)
    assert (confs.diff(dim=0) <= 1e-12).all()
    assert (confs[-1] < confs[0]).all()


def test_bad_input():
    c = torch.tensor([0.2, 0.9])
    k = torch.tensor([True, False])
    z = torch.randn(4, 6)
    y = torch.tensor([0, 1, 2, 3])
    cases = [
        (lambda: reliability_bins([0.2, 0.9], k), "confidence"),
        (lambda: reliability_bins(torch.tensor([1, 0]), k), "confidence"),
        (lambda: reliability_bins(torch.tensor([0.2, 1.5]), k),
         "confidence"),
        (lambda: reliability_bins(torch.tensor([0.2, math.nan]), k),
         "confidence"),
        (lambda: reliability_bins(torch.zeros(0), torch.zeros(0)),
         "confidence"),
        (lambda: reliability_bins(c.view(2, 1), k.view(2, 1)), "confidence"),
        (lambda: reliability_bins(c, k[:1]), "correct"),
        (lambda: reliability_bins(c, torch.tensor([2, 0])), "correct"),
        (lambda: reliability_bins(c, k, n_bins=0), "n_bins"),
        (lambda: reliability_bins(c, k, n_bins=2.0), "n_bins"),
        (lambda: expected_calibration_error(c, k, n_bins=True), "n_bins"),
        (lambda: top1_confidence(z, y.float()), "targets"),
        (lambda: top1_confidence(z, y, temperature=0.0), "temperature"),
        (lambda: temperature_nll(z, y, -1.0), "temperature"),
        (lambda: nll_derivatives(z, y[:3], 1.0), "targets"),
        (lambda: nll_derivatives(z, y, math.inf), "beta"),
        (lambda: fit_temperature(z, y, lo=2.0, hi=1.0), "lo, hi"),
        (lambda: fit_temperature(z, y, lo=0.0), "lo, hi"),
        (lambda: fit_temperature(z.long(), y), "logits"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()


def test_fit_refuses_edge_minimum():
    # always right with a clear margin: sharper is always better (tau -> 0)
    z = torch.eye(5, dtype=torch.float64) * 3  # (N, V)
    y = torch.arange(5)  # (N,)
    with pytest.raises(ValueError, match="lo, hi.*edge"):
        fit_temperature(z, y)
    # always wrong: flatter is always better (tau -> infinity)
    with pytest.raises(ValueError, match="lo, hi.*edge"):
        fit_temperature(z, (y + 1) % 5)
    # a bracket that excludes a minimum known to be near 2
    logits, t = _synthetic(2.0, 7, n=4000)
    with pytest.raises(ValueError, match="lo, hi.*edge"):
        fit_temperature(logits, t, lo=0.1, hi=1.5)
    assert 1.8 < fit_temperature(logits, t, lo=1.5, hi=3.0) < 2.2
