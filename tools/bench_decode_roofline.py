"""The decode roofline: time per token against the memory floor of eq.
(eq-decode-floor), ours against Hugging Face GPT2LMHeadModel, on one thread.

For each shape (width 128 to GPT-2 small) and each context position S, both
models (same random weights, GPT.from_hf_gpt2) decode greedily in lockstep
(tools/bench_kv_cache.py's `lockstep`: ours through the package's one loop,
decode_stream; one step of ours, one of Hugging Face's, alternating which
goes first), so every pair of steps sees the same load. A point at position S times the steps whose key positions run from
S - n + 1 to S. The read bandwidth (transformer.bench.read_bandwidth,
512 MiB, far beyond the last-level cache) is measured at the start, after
every round and at the end, in the same process and thread count, and the
floor of every point uses the whole run's samples of the fastest reader.
A torch.profiler table of one GPT-2 small decode step per model says where
the time above the floor goes.

Writes results/kv_cache/decode_roofline.json. Run time about 4 minutes on a
busy 2-core machine; --quick (a few seconds, written
under results/tmp/) for a smoke test.

Usage: .venv/bin/python tools/bench_decode_roofline.py [--quick] [--out PATH]
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import oracles  # noqa: E402  (tools/, this script's folder)
from bench_kv_cache import bench_args, lockstep  # noqa: E402
from transformer.bench import (environment, latency_summary,  # noqa: E402
                               peak_read_bandwidth, quantile,
                               ratio_of_medians_ci, read_bandwidth,
                               write_json)
from transformer.kv_cache import (decode_step_bytes,  # noqa: E402
                                  decode_stream)
from transformer.model import GPT, GPTConfig  # noqa: E402
from transformer.training import PRESETS  # noqa: E402

OUT = ROOT / "results" / "kv_cache" / "decode_roofline.json"
QUICK_OUT = ROOT / "results" / "tmp" / "decode_roofline-quick.json"
BLOCK = 1024
# GPT-2-like shapes from the book's tiny width to GPT-2 small; the wider
# ones carry GPT-2's vocabulary, so their weights outgrow the caches
SHAPES = {  # tiny: the `tiny` preset's shape (transformer.training.PRESETS)
    "tiny": {k: PRESETS["tiny"][0][k]
             for k in ("vocab_size", "n_layer", "n_head", "n_embd")},
    "d256": dict(vocab_size=50257, n_layer=4, n_head=4, n_embd=256),
    "d512": dict(vocab_size=50257, n_layer=8, n_head=8, n_embd=512),
    "gpt2_small": dict(vocab_size=50257, n_layer=12, n_head=12,
                       n_embd=768),
}
POSITIONS = (64, 256, 1024)
STEPS = 32  # decode steps timed per model per round and position
ROUNDS = {"tiny": 6, "d256": 4, "d512": 4, "gpt2_small": 5}
BW_BYTES = 2 ** 29


def bandwidth(t_start, nbytes, repeat):
    rec = read_bandwidth(nbytes=nbytes, repeat=repeat, threads=1)
    rec["at_s"] = time.perf_counter() - t_start
    return rec


def profile_step(ours, hf, prompt, steps):
    """Self CPU time by operator of `steps` decode steps per model after a
    prompt (1, T0) and one untimed step, each model in its decode loop
    (bench_kv_cache.lockstep's), profiled one step at a time, alternating
    the two models so both see the same load; per step: ms and calls."""
    from torch.profiler import ProfilerActivity, profile

    streams = {"ours": decode_stream(ours, prompt, steps + 2, temperature=0),
               "hf": oracles.hf_greedy_stream(hf, prompt, steps + 2)}
    for stream in streams.values():
        next(stream)  # the prefill
        next(stream)  # one untimed step
    acc = {"ours": {}, "hf": {}}
    for i in range(steps):
        for who in (("ours", "hf") if i % 2 == 0 else ("hf", "ours")):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                next(streams[who])  # one decode step
            for e in prof.key_averages():
                ms, n = acc[who].get(e.key, (0.0, 0))
                acc[who][e.key] = (ms + e.self_cpu_time_total / 1e3, n
                                   + e.count)
    tables = {}
    for who, ops in acc.items():
        rows = [{"op": k, "calls": n / steps, "self_ms": ms / steps}
                for k, (ms, n) in ops.items()]
        rows.sort(key=lambda o: -o["self_ms"])
        tables[who] = {"steps": steps, "position": prompt.shape[1] + 1,
                       "order": "one step per profile, alternating",
                       "self_ms_total": sum(o["self_ms"] for o in rows),
                       "ops": rows}
    return tables


def fastest_reader(bandwidths):
    """(reader, {reader: median GB/s}, {reader: every sample}) over a
    run's bandwidth records: the fastest reader's rate is the floor's."""
    pooled = {k: [x for b in bandwidths for x in b["samples"][k]]
              for k in bandwidths[0]["samples"]}
    med = {k: quantile(v, 0.5) for k, v in pooled.items()}
    return max(med, key=med.get), med, pooled


def close_record(record, out_path, t_start, reader, gb_s):
    """The run's end: its environment again, its wall time, the write."""
    record["environment_end"] = environment()
    record["wall_s"] = time.perf_counter() - t_start
    write_json(record, out_path)
    print(f"read bandwidth ({reader}) {gb_s:.2f} GB/s; wrote "
          f"{out_path} in {record['wall_s']:.0f} s")


def floor_ratio(steps, nbytes, bw_samples):
    """p50(step time) / floor, with a bootstrap interval that resamples
    the steps and the bandwidth samples independently."""
    floors = [nbytes / (g * 1e9) for g in bw_samples]
    return list(ratio_of_medians_ci(steps, floors, paired=False))


def main(argv=None) -> int:
    args = bench_args(argv, __doc__)
    steps, rounds, positions = STEPS, ROUNDS, POSITIONS
    bw_bytes, bw_repeat, prof_steps = BW_BYTES, 3, 8
    if args.quick:
        steps, positions = 4, (64,)
        rounds = {k: 1 for k in ROUNDS}
        bw_bytes, bw_repeat, prof_steps = 2 ** 24, 1, 2
    out_path = Path(args.out) if args.out else (
        QUICK_OUT if args.quick else OUT)
    t_start = time.perf_counter()
    record = {"threads": 1, "block_size": BLOCK, "steps_per_round": steps,
              "positions": list(positions), "hf_attn": "sdpa",
              "order": "lockstep: alternating single decode steps",
              "floor": "eq-decode-floor at the point's middle position, "
                       "fastest reader's bandwidth samples of the run",
              "environment": environment(), "bandwidth": [], "points": []}
    peak_trials = 3 if args.quick else 20
    # the peak sustained read rate on this host in this process, at the
    # start and at the end (four readers, best trial): the floor's rate
    record["peak"] = [peak_read_bandwidth(nbytes=bw_bytes,
                                          trials=peak_trials)]
    record["bandwidth"].append(bandwidth(t_start, bw_bytes, bw_repeat))
    for name, shape in SHAPES.items():
        cfg = GPTConfig(block_size=BLOCK, **shape)
        hf = oracles.hf_gpt2(cfg, attn="sdpa")  # Hugging Face's default
        ours = GPT.from_hf_gpt2(hf).eval()
        g = torch.Generator().manual_seed(1)
        tokens = torch.randint(0, shape["vocab_size"], (1, BLOCK),
                               generator=g)  # (1, block)
        runs = {S: {"ours": [], "hf": [], "same": True} for S in positions}
        with torch.no_grad():
            lockstep(ours, hf, tokens[:, :16], 4)  # warm-up
            for _ in range(rounds[name]):
                for S in positions:
                    prompt = tokens[:, :S - steps]  # (1, S - n)
                    ta, tb, same = lockstep(ours, hf, prompt, steps + 1)
                    runs[S]["ours"].append(ta)
                    runs[S]["hf"].append(tb)
                    runs[S]["same"] = runs[S]["same"] and same
                record["bandwidth"].append(
                    bandwidth(t_start, bw_bytes, bw_repeat))
            if name == "gpt2_small":
                record["profile"] = profile_step(
                    ours, hf, tokens[:, :positions[len(positions) // 2]],
                    prof_steps)
        for S in positions:
            r = runs[S]
            fa = [x for run in r["ours"] for x in run]
            fb = [x for run in r["hf"] for x in run]
            mid = S - (steps - 1) // 2  # the middle of S - n + 1 .. S
            point = {"shape": name, "config": shape, "S": S,
                     "S_steps": [S - steps + 1, S], "S_mid": mid,
                     "bytes": decode_step_bytes(cfg, mid),
                     "loadavg": list(os.getloadavg()),
                     "ours": {"step_s": r["ours"],
                              "summary": latency_summary(fa)},
                     "hf": {"step_s": r["hf"],
                            "summary": latency_summary(fb)},
                     "ratio_ours_over_hf": list(ratio_of_medians_ci(fa, fb)),
                     "same_tokens": r["same"]}
            record["points"].append(point)
            print(f"{name} S={S}: ours p50 "
                  f"{point['ours']['summary']['p50'] * 1e3:.2f} ms, hf p50 "
                  f"{point['hf']['summary']['p50'] * 1e3:.2f} ms, ours/hf "
                  f"{point['ratio_ours_over_hf'][0]:.3f} "
                  f"({time.perf_counter() - t_start:.0f} s)", flush=True)
        write_json(record, out_path)  # after every shape: partial runs
        del hf, ours
    record["bandwidth"].append(bandwidth(t_start, bw_bytes, bw_repeat))
    record["peak"].append(peak_read_bandwidth(nbytes=bw_bytes,
                                              trials=peak_trials))
    # the floor: the fastest reader over the whole run, all its samples
    reader, med, pooled = fastest_reader(record["bandwidth"])
    record["bandwidth_run"] = {
        "reader": reader, "samples": pooled[reader],
        "summary": {k: latency_summary(v) for k, v in pooled.items()},
        "GB_s": med[reader]}
    for p in record["points"]:
        for who in ("ours", "hf"):
            flat = [x for run in p[who]["step_s"] for x in run]
            p[who]["floor_s"] = p["bytes"]["total"] / (med[reader] * 1e9)
            p[who]["ratio_over_floor"] = floor_ratio(
                flat, p["bytes"]["total"], pooled[reader])
        print(f"{p['shape']} S={p['S']}: ours/floor "
              f"{p['ours']['ratio_over_floor'][0]:.2f}, hf/floor "
              f"{p['hf']['ratio_over_floor'][0]:.2f}")
    close_record(record, out_path, t_start, reader, med[reader])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
