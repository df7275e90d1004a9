"""Chapter "Evaluation uncertainty and error bars": known answers (closed
forms of Student's t, published table values, hand computations)."""
import math

import pytest
import torch

from transformer.stats import (Summary, bootstrap_ci, format_summary,
                                mean_sd, normal_cdf, normal_quantile,
                                paired_difference, summarize, t_cdf,
                                t_quantile, unpaired_difference)


def test_worked_example():
    scores = [0.76, 0.84, 0.80, 0.84, 0.76]
    mean, sd = mean_sd(scores)
    assert mean == pytest.approx(0.80, abs=1e-12)
    assert sd == pytest.approx(0.04, abs=1e-12)
    s = summarize(scores, method="normal")
    assert s.se == pytest.approx(0.04 / math.sqrt(5), abs=1e-12)
    assert s.se == pytest.approx(0.0179, abs=1e-4)
    assert (round(s.lo, 3), round(s.hi, 3)) == (0.765, 0.835)
    t = summarize(scores)
    assert t.method == "t" and t.n == 5
    assert t.half_width == pytest.approx(2.7764451051977987 * s.se,
                                         abs=1e-10)
    assert (round(t.lo, 3), round(t.hi, 3)) == (0.750, 0.850)
    assert format_summary(t) == "0.800 [0.750, 0.850] (95% t, n=5)"


def t2(p):  # closed form for 2 degrees of freedom
    return (2 * p - 1) / math.sqrt(2 * p * (1 - p))


def t4(p):  # closed form for 4 degrees of freedom
    a = 4 * p * (1 - p)
    q = math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a)
    return math.copysign(2 * math.sqrt(q - 1), p - 0.5)


@pytest.mark.parametrize("p", [0.01, 0.2, 0.6, 0.9, 0.975, 0.995])
def test_t_quantile_closed_forms(p):
    assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)),
                                             rel=1e-9)
    assert t_quantile(p, 2) == pytest.approx(t2(p), rel=1e-9)
    assert t_quantile(p, 4) == pytest.approx(t4(p), rel=1e-9)
    assert t_quantile(p, 1e7) == pytest.approx(normal_quantile(p), rel=1e-5)


@pytest.mark.parametrize("q, df, want", [
    (0.975, 4, 2.776445105), (0.975, 9, 2.262157163),
    (0.975, 29, 2.045229642), (0.995, 4, 4.604094871),
    (0.95, 10, 1.812461123)])
def test_t_table_values(q, df, want):
    assert t_quantile(q, df) == pytest.approx(want, abs=2e-9)


def test_normal_quantile_values():
    assert normal_quantile(0.975) == pytest.approx(1.959963984540054,
                                                   abs=1e-12)
    assert normal_quantile(0.5) == pytest.approx(0.0, abs=1e-12)
    assert normal_quantile(0.05) == pytest.approx(-1.6448536269514722,
                                                  abs=1e-12)


@pytest.mark.parametrize("df", [1, 3, 7.5, 30])
@pytest.mark.parametrize("x", [-3.0, -0.4, 0.0, 1.1, 5.0])
def test_cdf_quantile_roundtrip(df, x):
    p = t_cdf(x, df)
    assert t_cdf(-x, df) == pytest.approx(1 - p, abs=1e-14)
    assert t_quantile(p, df) == pytest.approx(x, abs=1e-8)
    assert normal_quantile(normal_cdf(x)) == pytest.approx(x, abs=1e-9)


def test_coverage():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(20_000, 5, generator=g, dtype=torch.float64) * 3 + 2
    m, se = x.mean(1), x.std(1) / math.sqrt(5)
    cov_t = ((m - 2).abs() <= t_quantile(0.975, 4) * se).double().mean()
    cov_z = ((m - 2).abs() <= 1.96 * se).double().mean()
    exact_z = 2 * t_cdf(1.96, 4) - 1
    assert abs(cov_t.item() - 0.95) < 0.01
    assert abs(cov_z.item() - exact_z) < 0.01 and exact_z < 0.89


def test_bootstrap_ci():
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(400, generator=g, dtype=torch.float64) + 1).tolist()
    assert bootstrap_ci(x, seed=5) == bootstrap_ci(x, seed=5)
    lo, hi = bootstrap_ci(x)
    t = summarize(x)
    # for many units the bootstrap and t intervals agree closely
    assert lo == pytest.approx(t.lo, abs=0.1 * t.half_width)
    assert hi == pytest.approx(t.hi, abs=0.1 * t.half_width)
    assert summarize(x, method="bootstrap").lo == lo
    lo_m, hi_m = bootstrap_ci(x, "median")
    assert lo_m <= sorted(x)[199] <= hi_m and hi_m - lo_m < 0.5
    custom = bootstrap_ci(x, lambda r: r.amax(-1))
    assert custom[1] <= max(x)
    assert bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)


def test_paired_and_unpaired():
    a = [1.0, 2.0, 3.0, 4.0]
    b = [0.5, 1.0, 2.5, 3.0]
    p = paired_difference(a, b)
    d = summarize([0.5, 1.0, 0.5, 1.0])
    assert (p.mean, p.se, p.lo, p.hi) == (d.mean, d.se, d.lo, d.hi)
    # Welch by hand: var a = 5/3, var b = 17/12 (sample), n = 4 each
    va, vb = (5 / 3) / 4, (17 / 12) / 4
    df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 3)
    u = unpaired_difference(a, b)
    assert u.mean == pytest.approx(0.75, abs=1e-12)
    assert u.se == pytest.approx(math.sqrt(va + vb), abs=1e-12)
    assert u.half_width == pytest.approx(t_quantile(0.975, df) * u.se,
                                         abs=1e-12)
    assert p.half_width < u.half_width  # pairing removes the shared part
    assert isinstance(u, Summary) and math.isnan(u.sd)


@pytest.mark.parametrize("call, arg", [
    (lambda: summarize([1.0]), "values"),
    (lambda: summarize("ab"), "values"),
    (lambda: summarize([1.0, float("inf")]), "values"),
    (lambda: summarize([1.0, 2.0], level=1.0), "level"),
    (lambda: summarize([1.0, 2.0], method="z"), "method"),
    (lambda: t_quantile(1.0, 3), "q"),
    (lambda: t_cdf(1.0, 0.5), "df"),
    (lambda: t_cdf(1.0, 3, points=3), "points"),
    (lambda: bootstrap_ci([1.0, 2.0], "mode"), "statistic"),
    (lambda: bootstrap_ci([1.0, 2.0], n_boot=5), "n_boot"),
    (lambda: paired_difference([1.0, 2.0], [1.0, 2.0, 3.0]), "b"),
    (lambda: format_summary(summarize([1.0, 2.0]), digits=-1), "digits"),
])
def test_bad_input(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


def test_seeds_for_halfwidth():
    from transformer.stats import seeds_for_halfwidth
    # the audit's pooled spread: 11 seeds, and 10 are not enough
    n = seeds_for_halfwidth(0.0285, 0.02)
    assert n == 11
    for m, ok in ((n, True), (n - 1, False)):
        w = t_quantile(0.975, m - 1) * 0.0285 / math.sqrt(m)
        assert (w <= 0.02) is ok
    assert seeds_for_halfwidth(1.0, 100.0) == 2  # the least the rule allows
    assert seeds_for_halfwidth(0.0285, 0.02, confidence=0.99) > n
    eq = seeds_for_halfwidth(0.0285, 0.02, power=0.8)
    nw = seeds_for_halfwidth(0.0285, 0.02, power=0.8, claim="no_worse")
    assert n < nw < eq
    # eq. (eq-seeds-power) at its answer and one below
    z = normal_quantile(0.9)
    assert (t_quantile(0.975, eq - 1) + z) * 0.0285 / math.sqrt(eq) <= 0.02
    assert (t_quantile(0.975, eq - 2) + z) * 0.0285 / math.sqrt(eq - 1) > 0.02
    # scale-free: only sd / delta matters
    assert seeds_for_halfwidth(2.85, 2.0, power=0.8) == eq
    for bad in ({"sd": 0.0}, {"delta": -1.0}, {"delta": math.nan},
                {"confidence": 1.5}, {"power": 0.0}, {"claim": "better"}):
        kwargs = {"sd": 0.03, "delta": 0.02, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            seeds_for_halfwidth(**kwargs)


def test_equivalence_and_no_worse_verdicts():
    from transformer.stats import equivalence_verdict, no_worse_verdict
    cases = [((-0.01, 0.015), "equivalent", "no worse"),
             ((-0.02, 0.01), "inconclusive", "no worse"),  # touches -delta
             ((-0.01, 0.02), "inconclusive", "inconclusive"),  # touches +delta
             ((0.02, 0.05), "different", "worse"),
             ((-0.09, -0.03), "different", "no worse"),
             ((-0.05, 0.05), "inconclusive", "inconclusive"),
             ((0.01, 0.03), "inconclusive", "inconclusive")]
    for iv, eq, nw in cases:
        assert equivalence_verdict(iv, 0.02) == eq, iv
        assert no_worse_verdict(iv, 0.02) == nw, iv
    s = summarize([0.001, -0.002, 0.003, 0.0])  # a Summary works as well
    assert equivalence_verdict(s, 0.02) == "equivalent"
    assert equivalence_verdict(s, 0.001) == "inconclusive"
    with pytest.raises(ValueError, match="delta"):
        equivalence_verdict((0.0, 0.1), 0.0)
    with pytest.raises(ValueError, match="margin"):
        no_worse_verdict((0.0, 0.1), -0.1)
    with pytest.raises(ValueError, match="interval"):
        equivalence_verdict((0.1, 0.0), 0.02)


def test_percentile_interval_and_resampler_are_the_bootstrap_parts():
    """bootstrap_ci is resample_units, a statistic and percentile_interval:
    the same seed gives the same interval through the parts; the
    resampler's indices are in range, one row per replicate."""
    from transformer.stats import percentile_interval, resample_units
    reps = torch.arange(101, dtype=torch.float64)  # quantiles are exact
    lo, hi = percentile_interval(reps, 0.9)
    assert abs(lo - 5.0) < 1e-12 and abs(hi - 95.0) < 1e-12
    idx = resample_units(7, 300, torch.Generator().manual_seed(0))
    assert idx.shape == (300, 7) and int(idx.min()) >= 0 \
        and int(idx.max()) <= 6
    xs = [0.3, 1.2, 2.0, 2.2, 3.9, 4.1, 7.0]
    by_hand = percentile_interval(torch.tensor(xs, dtype=torch.float64)[
        resample_units(7, 500, torch.Generator().manual_seed(4))].median(
            dim=-1).values, 0.8)
    assert bootstrap_ci(xs, lambda x: x.median(dim=-1).values, level=0.8,
                        n_boot=500, seed=4) == by_hand
