"""Grouped-query decoding: time per token against the memory floor, for
n_kv_head in {H, H/2, 1}, at contexts from inside the last-level cache to
far beyond it, on one thread.

The prediction and its falsifier are written into the record before the
first timing (PREDICTION, FALSIFIER below). For each context S, three
models of one shape (4 layers, width 128, 4 query heads of 32, RoPE, byte
vocabulary) that differ only in their key/value heads get caches of S - 1
positions filled with random keys and values; each then times one decode
step at position S - 1 (the step reads S keys), the cache's length reset
after every step so each sample reads the same S. The three models take
turns, one step each, rotating which goes first, so every round sees the
same load. The floor is eq. (eq-decode-floor) with eq. (eq-gqa-cache)'s
cache bytes, at the fastest reader's read bandwidth over the run
(tools/bench_decode_roofline.py's `bandwidth`, measured at the start, after
every context and at the end).

Writes results/extattn/gqa_decode.json (about a minute on a 2-core
machine; memory peaks near 1.2 GiB at the longest context); --quick (a few
seconds, written under results/tmp/) for a smoke test.

Usage: .venv/bin/python tools/bench_gqa_decode.py [--quick] [--out PATH]
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench_decode_roofline import (bandwidth, bench_args,  # noqa: E402
                                   close_record, fastest_reader,
                                   floor_ratio)
from transformer.bench import (environment, latency_summary,  # noqa: E402
                               ratio_of_medians_ci, write_json)
from transformer.kv_cache import decode_step_bytes, make_caches  # noqa: E402
from transformer.model import GPT, GPTConfig  # noqa: E402

OUT = ROOT / "results" / "extattn" / "gqa_decode.json"
QUICK_OUT = ROOT / "results" / "tmp" / "gqa_decode_quick.json"
SHAPE = dict(vocab_size=256, n_layer=4, n_head=4, n_embd=128,
             pos_encoding="rope")
KV_HEADS = (4, 2, 1)
POSITIONS = (512, 4096, 32768, 131072)
ROUNDS = {512: 200, 4096: 120, 32768: 60, 131072: 30}
BW_BYTES = 2 ** 29
PREDICTION = (
    "A decoding step reads each stored key and value once (grouped_decode: "
    "the g query heads of a group are g rows of one product with the keys, "
    "an in-place softmax and one product with the values), so its time "
    "follows the bytes of eq. (eq-decode-floor) once the cache dominates "
    "them. At S = 512 and S = 4096 (the multi-head cache holds 2 and 16 "
    "MiB, at most 4 MiB per layer, inside the last-level cache) two and "
    "one key/value heads decode within 10% of multi-head (each ratio's "
    "interval inside [0.9, 1.1]); at S = 131072 (multi-head: 512 MiB in "
    "all, one head 128 MiB) one key/value head decodes at least 1.5 times "
    "as fast as multi-head and two heads at least 1.2 times. (Earlier "
    "records against the same thresholds: gqa_decode_loop.json, one call "
    "per query slice; gqa_decode_onecall.json, one call through the "
    "book's attention and softmax.)")
FALSIFIER = (
    "At S = 131072 the interval of multi-head over one head's median step "
    "time lies wholly below 1.5; or at S <= 4096 an interval lies wholly "
    "outside [0.9, 1.1].")


def model_with(n_kv: int, block: int) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=block, n_kv_head=n_kv, **SHAPE)).eval()


def filled_caches(model: GPT, S: int, g: torch.Generator):
    """Caches of S positions whose first S - 1 hold random keys and
    values: a decode step at position S - 1 then reads S keys."""
    caches = make_caches(model, 1, S)
    for c in caches:
        c.k[:, :, :S - 1].normal_(generator=g)
        c.v[:, :, :S - 1].normal_(generator=g)
        c.length = S - 1
    return caches


def profile_steps(models, caches, S, steps):
    """Self CPU time by operator of `steps` decode steps of each model at
    position S - 1, the models taking turns: {n_kv: [{op, self_ms, calls}]}
    per step, the eight largest."""
    from torch.profiler import ProfilerActivity, profile

    one = torch.zeros(1, 1, dtype=torch.int64)  # (1, 1)
    rows = {}
    for h in models:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                models[h](one, start_pos=S - 1, caches=caches[h])
                for c in caches[h]:
                    c.length = S - 1
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        rows[h] = [{"op": e.key, "self_ms": e.self_cpu_time_total / 1e3
                    / steps, "calls": e.count / steps} for e in ops[:8]]
    return rows


def main(argv=None) -> int:
    args = bench_args(argv, __doc__)
    positions, rounds, bw_bytes, bw_repeat = POSITIONS, ROUNDS, BW_BYTES, 3
    if args.quick:
        positions, rounds = (64, 256), {64: 3, 256: 3}
        bw_bytes, bw_repeat = 2 ** 22, 1
    out_path = Path(args.out) if args.out else (
        QUICK_OUT if args.quick else OUT)
    t_start = time.perf_counter()
    record = {"prediction": PREDICTION, "falsifier": FALSIFIER,
              "kernel": "grouped_decode: keys on the left, in-place softmax",
              "shape": SHAPE, "kv_heads": list(KV_HEADS), "threads": 1,
              "positions": list(positions),
              "order": "one decode step per model, rotating the first",
              "floor": "eq-decode-floor with eq-gqa-cache's bytes, fastest "
                       "reader's bandwidth samples of the run",
              "environment": environment(), "bandwidth": [], "points": []}
    write_json(record, out_path)  # the prediction, before any timing
    record["bandwidth"].append(bandwidth(t_start, bw_bytes, bw_repeat))
    g = torch.Generator().manual_seed(1)
    one = torch.zeros(1, 1, dtype=torch.int64)  # (1, 1)
    for S in positions:
        models = {h: model_with(h, S) for h in KV_HEADS}
        caches = {h: filled_caches(m, S, g) for h, m in models.items()}
        steps = {h: [] for h in KV_HEADS}
        with torch.no_grad():
            for h in KV_HEADS:  # one untimed step each
                models[h](one, start_pos=S - 1, caches=caches[h])
                for c in caches[h]:
                    c.length = S - 1
            for r in range(rounds[S]):
                order = KV_HEADS[r % 3:] + KV_HEADS[:r % 3]
                for h in order:
                    t0 = time.perf_counter()
                    models[h](one, start_pos=S - 1, caches=caches[h])
                    steps[h].append(time.perf_counter() - t0)
                    for c in caches[h]:
                        c.length = S - 1
        for h in KV_HEADS:
            cfg = models[h].config
            point = {"S": S, "n_kv_head": h,
                     "cache_bytes": sum(c.nbytes for c in caches[h]),
                     "bytes": decode_step_bytes(cfg, S),
                     "loadavg": list(os.getloadavg()),
                     "step_s": steps[h], "summary": latency_summary(steps[h]),
                     "mha_over_this": list(ratio_of_medians_ci(
                         steps[KV_HEADS[0]], steps[h]))}
            record["points"].append(point)
            print(f"S={S} n_kv={h}: p50 {point['summary']['p50'] * 1e3:.2f} "
                  f"ms, multi-head / this {point['mha_over_this'][0]:.2f} "
                  f"({time.perf_counter() - t_start:.0f} s)", flush=True)
        if S == positions[-1]:  # where the time goes, at the longest S
            with torch.no_grad():
                record["profile"] = {"S": S, "per_step": profile_steps(
                    models, caches, S, 2 if args.quick else 5)}
        del models, caches
        record["bandwidth"].append(bandwidth(t_start, bw_bytes, bw_repeat))
        write_json(record, out_path)  # after every context: partial runs
    reader, med, pooled = fastest_reader(record["bandwidth"])
    record["bandwidth_run"] = {"reader": reader, "GB_s": med[reader],
                               "samples": pooled[reader]}
    for p in record["points"]:
        p["floor_s"] = p["bytes"]["total"] / (med[reader] * 1e9)
        p["ratio_over_floor"] = floor_ratio(p["step_s"], p["bytes"]["total"],
                                            pooled[reader])
    close_record(record, out_path, t_start, reader, med[reader])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
