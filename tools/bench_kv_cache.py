"""Per-token decode latency with and without the KV cache (E11), ours
against Hugging Face GPT2LMHeadModel with its cache, interleaved.

Both models have the same random weights (GPT.from_hf_gpt2) and decode
greedily in lockstep (one step of ours, one of Hugging Face's, alternating
which goes first), with torch.set_num_threads(1), so every pair of steps
sees the same machine load. Ours decodes through the package's one loop,
transformer.kv_cache.decode_stream. Every decode step is timed on its own,
so a run of N new tokens gives N - 1 per-token latencies per model. At the
tiny shape our model also decodes without the cache (full recompute, the
same loop through decode_step_times).

Writes results/kv_cache/decode_latency.json. Run time about 10 minutes on
a busy 2-core machine; --quick (one round of 32 tokens per shape,
about a minute, written under results/tmp/) for a smoke test.

Usage: .venv/bin/python tools/bench_kv_cache.py [--quick] [--out PATH]
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import oracles  # noqa: E402  (tools/, this script's folder)
from tool_cli import add_out, add_quick, parser  # noqa: E402  (tools/)
from transformer.bench import (environment, latency_summary,  # noqa: E402
                               ratio_of_medians_ci, write_json)
from transformer.kv_cache import (decode_step_times,  # noqa: E402
                                  decode_stream)
from transformer.model import GPT, GPTConfig  # noqa: E402
from transformer.training import PRESETS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "kv_cache" / "decode_latency.json"
QUICK_OUT = ROOT / "results" / "tmp" / "decode_latency-quick.json"
SHAPES = {  # tiny: the `tiny` preset's shape (transformer.training.PRESETS)
    "tiny": {k: PRESETS["tiny"][0][k]
             for k in ("vocab_size", "n_layer", "n_head", "n_embd")},
    "gpt2_small": dict(vocab_size=50257, n_layer=12, n_head=12, n_embd=768),
}
PROMPT = 16
LENGTHS = (32, 128, 512)


def lockstep(ours, hf, prompt, n):
    """Both models decode n tokens greedily after `prompt` (1, T0), ours
    through the package's one decoding loop (`decode_stream` at
    temperature 0), Hugging Face's through `oracles.hf_greedy_stream`; the
    prefills are untimed, then one step of ours, one of Hugging Face's,
    alternating which goes first, so every pair of steps sees the same
    machine load. Returns both lists of n - 1 step times (seconds) and
    whether the two chose the same tokens."""
    streams = {"ours": decode_stream(ours, prompt, n, temperature=0),
               "hf": oracles.hf_greedy_stream(hf, prompt, n)}
    last = {who: next(stream) for who, stream in streams.items()}
    times = {who: [] for who in streams}
    same = torch.equal(last["ours"], last["hf"])
    for i in range(n - 1):
        for who in (("ours", "hf") if i % 2 == 0 else ("hf", "ours")):
            t0 = time.perf_counter()
            last[who] = next(streams[who])  # (1,): one decode step
            times[who].append(time.perf_counter() - t0)
        same = same and torch.equal(last["ours"], last["hf"])
    return times["ours"], times["hf"], same


def bench_args(argv, doc: str):
    """A decode benchmark's command line, `--quick` and `--out PATH`; the
    run is timed on one thread from here on."""
    ap = parser(doc)
    add_quick(ap)
    add_out(ap, help="where the record is written (default: the file the "
                     "tool's docstring names; under results/tmp/ with "
                     "--quick)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    return args


def build(shape):
    hf = oracles.hf_gpt2(GPTConfig(block_size=1024, **shape), attn="eager")
    return hf, GPT.from_hf_gpt2(hf).eval()


def main(argv=None) -> int:
    args = bench_args(argv, __doc__)
    # lockstep rounds per (shape, length): each round decodes n tokens with
    # both models, alternating single steps, so every pair of steps sees
    # the same load; fewer at GPT-2 small, where a step takes ~100x longer
    rounds = {"tiny": {32: 10, 128: 6, 512: 3},
              "gpt2_small": {32: 3, 128: 2, 512: 1}}
    recompute_rounds = {32: 4, 128: 2, 512: 1}  # tiny only
    lengths = LENGTHS
    if args.quick:  # one round of the shortest length: the code runs
        lengths = LENGTHS[:1]
        rounds = {k: {n: 1 for n in v} for k, v in rounds.items()}
        recompute_rounds = {n: 1 for n in recompute_rounds}
    out_path = Path(args.out) if args.out else (
        QUICK_OUT if args.quick else OUT)
    record = {"prompt": PROMPT, "lengths": list(lengths), "threads": 1,
              "order": "lockstep: alternating single decode steps",
              "environment": environment(), "runs": []}
    t_start = time.perf_counter()
    for shape_name, shape in SHAPES.items():
        hf, ours = build(shape)
        g = torch.Generator().manual_seed(1)
        prompt = torch.randint(0, shape["vocab_size"], (1, PROMPT),
                               generator=g)  # (1, T0)
        with torch.no_grad():
            lockstep(ours, hf, prompt, 8)  # warm-up
            for n in lengths:
                ta, tb, same = [], [], True
                for _ in range(rounds[shape_name][n]):
                    a, b, ok = lockstep(ours, hf, prompt, n)
                    ta.append(a)
                    tb.append(b)
                    same = same and ok
                flat_a = [x for run in ta for x in run]
                flat_b = [x for run in tb for x in run]
                ratio, lo, hi = ratio_of_medians_ci(flat_a, flat_b)
                entry = {"shape": shape_name, "config": shape, "n_new": n,
                         "loadavg": list(os.getloadavg()),
                         "ours": {"step_s": ta,
                                  "summary": latency_summary(flat_a)},
                         "hf": {"step_s": tb,
                                "summary": latency_summary(flat_b)},
                         "ratio_ours_over_hf": [ratio, lo, hi],
                         "same_tokens": same}
                if shape_name == "tiny":  # the same loop, no cache
                    rec = [decode_step_times(ours, prompt, n - 1,
                                             cached=False)
                           for _ in range(recompute_rounds[n])]
                    entry["ours_recompute"] = {
                        "step_s": rec, "summary": latency_summary(
                            [s for run in rec for s in run])}
                record["runs"].append(entry)
                write_json(record, out_path)  # after every entry: partial runs
                print(f"{shape_name} n={n}: ours p50 "
                      f"{entry['ours']['summary']['p50'] * 1e3:.3f} ms, hf "
                      f"p50 {entry['hf']['summary']['p50'] * 1e3:.3f} ms, "
                      f"ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}] "
                      f"({time.perf_counter() - t_start:.0f} s)", flush=True)
    record["environment_end"] = environment()
    write_json(record, out_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
