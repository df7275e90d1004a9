"""Appendix "Measuring honestly": the benchmark harness, on samples whose
answers are known (closed forms, NumPy's quantiles, a fake clock)."""
import json
import math

import numpy as np
import pytest
import torch

from transformer.bench import (benchmark, compare, environment,
                               format_latency, latency_summary, median_ci,
                               quantile, ratio_of_medians_ci,
                               peak_read_bandwidth, read_bandwidth, time_calls,
                               write_json)


@pytest.mark.parametrize("n", [2, 5, 30, 101])
@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.95, 0.99, 1.0])
def test_quantile_known(n, q):
    # on 1..n, h = q (n - 1) and Q(q) = 1 + h exactly, whatever the order
    xs = list(range(n, 0, -1))
    assert quantile(xs, q) == pytest.approx(1 + q * (n - 1), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_quantile_matches_numpy(seed):
    g = torch.Generator().manual_seed(seed)
    xs = torch.rand(37, generator=g, dtype=torch.float64).exp().tolist()
    for q in (0.1, 0.5, 0.95, 0.99):
        assert quantile(xs, q) == pytest.approx(
            float(np.percentile(xs, 100 * q)), abs=1e-12)


def test_bootstrap_coverage():
    # exponential(1) has median ln 2; 95% intervals from n = 41 samples
    # should cover it in about 95% of 200 seeded trials (binomial sd 1.5%)
    g = torch.Generator().manual_seed(123)
    trials, covered = 200, 0
    for t in range(trials):
        x = torch.empty(41, dtype=torch.float64).exponential_(generator=g)
        lo, hi = median_ci(x.tolist(), n_boot=500, seed=t)
        covered += lo <= math.log(2) <= hi
    assert 0.90 <= covered / trials <= 0.99, covered / trials


def test_median_ci_seeded_and_shrinks():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, generator=g, dtype=torch.float64)
    assert median_ci(x[:40].tolist(), seed=3) == median_ci(
        x[:40].tolist(), seed=3)
    w_small = median_ci(x[:40].tolist())
    w_large = median_ci(x.tolist())
    assert (w_large[1] - w_large[0]) < 0.6 * (w_small[1] - w_small[0])
    # a constant sample has nothing to resample
    assert median_ci([2.5] * 10) == (2.5, 2.5)


class FakeMachine:
    def __init__(self, slow_after):
        self.now, self.slow_after = 0.0, slow_after

    def clock(self):
        return self.now

    def work(self, cost):
        self.now += cost * (2.0 if self.now >= self.slow_after else 1.0)


def test_time_calls_counts_and_number():
    m = FakeMachine(slow_after=math.inf)
    calls = []
    out = time_calls(lambda: (calls.append(1), m.work(3.0)), warmup=4,
                     repeat=6, number=5, clock=m.clock)
    assert len(calls) == 4 + 6 * 5
    assert out == [3.0] * 6  # per-call time, not per-sample


def test_compare_interleaving_cancels_drift():
    m = FakeMachine(slow_after=40.0)
    rec = compare(lambda: m.work(1.0), lambda: m.work(1.0), warmup=0,
                  repeat=40, clock=m.clock)
    assert rec["ratio"] == 1.0 and rec["ratio_ci"] == [1.0, 1.0]
    assert rec["order"] == "alternating"
    # B genuinely twice as slow: the ratio says 0.5 despite the drift
    m = FakeMachine(slow_after=60.0)
    rec = compare(lambda: m.work(1.0), lambda: m.work(2.0), warmup=0,
                  repeat=40, clock=m.clock)
    assert rec["ratio"] == 0.5
    # sequential timing of identical work invents a factor of two
    m = FakeMachine(slow_after=40.0)
    ta = time_calls(lambda: m.work(1.0), 0, 40, clock=m.clock)
    tb = time_calls(lambda: m.work(1.0), 0, 40, clock=m.clock)
    ratio, lo, hi = ratio_of_medians_ci(ta, tb)
    assert ratio == 0.5 and hi < 1.0


def test_compare_alternates_order():
    order = []
    compare(lambda: order.append("a"), lambda: order.append("b"),
            warmup=0, repeat=4)
    assert "".join(order) == "abbaabba"


def test_summary_and_json(tmp_path):
    rec = benchmark(lambda: sum(range(100)), name="sum", warmup=2,
                    repeat=12, threads=1)
    s = rec["summary"]
    assert "mean" not in json.dumps(s)
    assert s["min"] <= s["p50_ci"][0] <= s["p50"] <= s["p50_ci"][1]
    assert s["p50"] <= s["p95"] <= s["p99"] <= s["max"]
    env = rec["environment"]
    for key in ("torch", "torch_threads", "cpu_model", "loadavg"):
        assert env[key] is not None, key
    assert env["torch_threads"] == 1 and env["torch"] == torch.__version__
    path = write_json(rec, tmp_path / "sub" / "sum.json")
    back = json.loads(path.read_text())
    assert back["samples"] == rec["samples"] and len(back["samples"]) == 12
    line = format_latency(s, unit="us")
    assert line.startswith("p50 ") and line.count(" us") == 7


def test_threads_restored():
    before = torch.get_num_threads()
    benchmark(lambda: None, repeat=3, threads=1)
    assert torch.get_num_threads() == before


def test_environment_keys():
    env = environment()
    assert len(env["loadavg"]) == 3 and env["cpu_count"] >= 1


@pytest.mark.parametrize("call, arg", [
    (lambda: quantile([], 0.5), "samples"),
    (lambda: quantile([1.0, float("nan")], 0.5), "samples"),
    (lambda: quantile([1.0], 1.5), "q"),
    (lambda: median_ci([1.0, 2.0], level=95), "level"),
    (lambda: median_ci([1.0, 2.0], n_boot=10), "n_boot"),
    (lambda: latency_summary("abc"), "samples"),
    (lambda: ratio_of_medians_ci([1.0, 2.0], [1.0]), "samples_b"),
    (lambda: time_calls(lambda: None, repeat=0), "repeat"),
    (lambda: time_calls(3), "fn"),
    (lambda: benchmark(lambda: None, threads=0), "threads"),
    (lambda: compare(lambda: None, None), "fn_b"),
    (lambda: write_json({}, "out.txt"), "path"),
    (lambda: format_latency(latency_summary([1.0]), unit="h"), "unit"),
    (lambda: read_bandwidth(nbytes=5000), "nbytes"),
    (lambda: read_bandwidth(nbytes=4096, repeat=0), "repeat"),
])
def test_bad_input(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


def test_cli(tmp_path):
    import bench as cli  # tools/bench.py (tools/ is on sys.path: conftest)

    assert cli.main(["--name", "t", "--repeat", "5", "--warmup", "1",
                     "--setup", "x = list(range(50))", "--stmt", "sum(x)",
                     "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "t.json").read_text())
    assert len(rec["samples"]) == 5 and rec["stmt"] == "sum(x)"
    assert {"summary", "environment"} <= set(rec)
    assert cli.main(["--name", "ab", "--repeat", "4", "--stmt", "1 + 1",
                     "--stmt-b", "2 * 2", "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "ab.json").read_text())
    assert len(rec["samples_a"]) == 4 and rec["ratio"] > 0


def test_ratio_of_medians_unpaired_takes_samples_of_two_lengths():
    """paired=False resamples each sample on its own, so two runs of
    different lengths compare; the interval contains the true ratio of 2
    for samples drawn around medians 2.05 and 1.025."""
    from transformer.bench import ratio_of_medians_ci
    g = torch.Generator().manual_seed(0)
    a = (2 + 0.1 * torch.rand(200, generator=g)).tolist()
    b = (1 + 0.05 * torch.rand(31, generator=g)).tolist()
    ratio, lo, hi = ratio_of_medians_ci(a, b, paired=False)
    assert lo <= ratio <= hi and abs(ratio - 2) < 0.05 and hi - lo < 0.2
    with pytest.raises(ValueError, match="samples_b"):
        ratio_of_medians_ci(a, b)  # paired needs equal lengths


def test_read_bandwidth_arithmetic_and_order():
    """Each sample is bytes / seconds / 1e9; the readers alternate which
    goes first (sum, gemv, gemv, sum); the fastest median is reported.
    A fake clock makes the four timed reads take 1, 2, 4 and 8 s."""
    ticks = iter([0, 1, 10, 12, 20, 24, 30, 38])  # start, end per read
    n = 2 ** 16
    bw = read_bandwidth(nbytes=n, repeat=2, clock=lambda: next(ticks))
    assert bw["samples"]["sum"] == [n / 1 / 1e9, n / 8 / 1e9]
    assert bw["samples"]["gemv"] == [n / 2 / 1e9, n / 4 / 1e9]
    assert bw["median"]["sum"] == pytest.approx(n * 9 / 16 / 1e9,
                                                rel=1e-12)
    assert bw["reader"] == "sum" and bw["GB_s"] == bw["median"]["sum"]
    assert bw["max"]["gemv"] == n / 2 / 1e9
    before = torch.get_num_threads()
    real = read_bandwidth(nbytes=2 ** 20, repeat=3)  # a real 1 MiB read
    for name in ("sum", "gemv"):
        assert len(real["samples"][name]) == 3
        assert all(math.isfinite(x) and x > 0
                   for x in real["samples"][name])
    assert torch.get_num_threads() == before and real["threads"] == 1


def test_peak_read_bandwidth_is_the_best_trial():
    """Four readers, the order rotating each trial (sum, dot, gemv, copy;
    then dot, gemv, copy, sum); the peak is the best single trial of any
    reader, not the best median. Fake clock: dot's first read takes 0.5 s
    (the best trial), gemv is steady at 0.6 and 0.7 s (the best median)."""
    durations = [4, 0.5, 0.6, 8,  # trial 0: sum, dot, gemv, copy
                 20, 0.7, 6, 5]  # trial 1: dot, gemv, copy, sum
    ticks, t = [], 0.0
    for d in durations:
        ticks += [t, t + d]
        t += d + 1
    ticks = iter(ticks)
    n = 2 ** 16
    pk = peak_read_bandwidth(nbytes=n, trials=2, clock=lambda: next(ticks))
    assert pk["samples"]["dot"] == [n / 0.5 / 1e9, n / 20 / 1e9]
    assert pk["samples"]["sum"] == [n / 4 / 1e9, n / 5 / 1e9]
    assert pk["reader"] == "dot" and pk["GB_s"] == n / 0.5 / 1e9
    assert max(pk["median"], key=pk["median"].get) == "gemv"
    assert pk["GB_s"] >= max(pk["median"].values())
    real = peak_read_bandwidth(nbytes=2 ** 20, trials=2)  # a real 1 MiB read
    assert all(len(v) == 2 and all(math.isfinite(x) and x > 0 for x in v)
               for v in real["samples"].values())
    with pytest.raises(ValueError, match="^nbytes:"):
        peak_read_bandwidth(nbytes=1000)


def test_git_commit_marks_a_dirty_tree(monkeypatch):
    """The one provenance recorder: a commit with "+dirty" when
    transformer/ has uncommitted changes (the old environment() never
    marked it), None outside a checkout; environment() carries it."""
    import subprocess

    import transformer.bench as bench

    class Done:
        def __init__(self, out, rc=0):
            self.stdout, self.returncode = out, rc

    def fake(porcelain, rc=0, code="b" * 40 + "\n"):
        def run(cmd, **kw):
            if "rev-parse" in cmd:
                return Done("a" * 40 + "\n", rc)
            return Done(code) if "log" in cmd else Done(porcelain)
        return run
    monkeypatch.setattr(subprocess, "run", fake(" M transformer/x.py\n"))
    assert bench.git_commit() == "a" * 40 + "+dirty"  # HEAD, marked
    assert bench.git_commit(short=True) == "aaaaaaa+dirty"
    assert bench.environment()["git_commit"] == "aaaaaaa+dirty"
    monkeypatch.setattr(subprocess, "run", fake(""))
    assert bench.git_commit() == "b" * 40  # clean: the code's last commit
    monkeypatch.setattr(subprocess, "run", fake("", code=""))
    assert bench.git_commit() == "a" * 40  # no such commit: HEAD
    monkeypatch.setattr(subprocess, "run", fake("", rc=128))
    assert bench.git_commit() is None
