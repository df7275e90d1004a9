"""Per-token decode latency with and without the KV cache (E11), ours
against Hugging Face GPT2LMHeadModel with its cache, interleaved.

Both models have the same random weights (GPT.from_hf_gpt2) and decode
greedily in lockstep (one step of ours, one of Hugging Face's, alternating
which goes first), with torch.set_num_threads(1), so every pair of steps
sees the same machine load. Every decode step is timed on its own, so a
run of N new tokens gives N - 1 per-token latencies per model. At the tiny
shape our model also decodes without the cache (full recompute).

Writes results/kv_cache/decode_latency.json. Run time about 10 minutes on
a busy 2-core machine; --quick for a smoke test.

Usage: .venv/bin/python tools/bench_kv_cache.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import oracles  # noqa: E402  (tools/, this script's folder)
from transformer.bench import (environment, latency_summary,  # noqa: E402
                               ratio_of_medians_ci, write_json)
from transformer.kv_cache import make_caches  # noqa: E402
from transformer.model import GPT, GPTConfig  # noqa: E402
from transformer.training import PRESETS  # noqa: E402

OUT = (Path(__file__).resolve().parent.parent / "results" / "kv_cache"
       / "decode_latency.json")
SHAPES = {  # tiny: the `tiny` preset's shape (transformer.training.PRESETS)
    "tiny": {k: PRESETS["tiny"][0][k]
             for k in ("vocab_size", "n_layer", "n_head", "n_embd")},
    "gpt2_small": dict(vocab_size=50257, n_layer=12, n_head=12, n_embd=768),
}
PROMPT = 16
LENGTHS = (32, 128, 512)


def ours_recompute(model, prompt, n):
    """Greedy decode of n tokens, rerunning the whole sequence each step."""
    seq = prompt
    t0 = time.perf_counter()
    logits, _ = model(seq)  # (1, T0, V)
    nxt = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    prefill = time.perf_counter() - t0
    steps, toks = [], [nxt.item()]
    for _ in range(n - 1):
        t0 = time.perf_counter()
        seq = torch.cat([seq, nxt], dim=1)  # (1, t + 1)
        logits, _ = model(seq)  # (1, t + 1, V)
        nxt = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        steps.append(time.perf_counter() - t0)
        toks.append(nxt.item())
    return prefill, steps, toks


def prefill(ours, hf, prompt, n):
    """Both models read `prompt` (1, T0) with room for n more tokens:
    our caches, the greedy next token of each, Hugging Face's cache and
    the next position."""
    caches = make_caches(ours, 1, prompt.shape[1] + n)
    a, _ = ours(prompt, caches=caches)  # (1, T0, V)
    out = hf(input_ids=prompt, use_cache=True)
    na = a[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    nb = out.logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    return caches, na, nb, out.past_key_values, prompt.shape[1]


def lockstep(ours, hf, prompt, n):
    """Both models decode n tokens greedily in lockstep, one step of ours,
    then one of Hugging Face's, alternating which goes first: every pair
    of steps sees the same machine load. Returns both per-step lists."""
    caches, na, nb, past, pos = prefill(ours, hf, prompt, n)
    ta, tb, same = [], [], True
    for i in range(n - 1):
        for who in (("a", "b") if i % 2 == 0 else ("b", "a")):
            t0 = time.perf_counter()
            if who == "a":
                a, _ = ours(na, start_pos=pos, caches=caches)  # (1, 1, V)
                na = a[:, -1].argmax(-1, keepdim=True)  # (1, 1)
                ta.append(time.perf_counter() - t0)
            else:
                out = hf(input_ids=nb, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nb = out.logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
                tb.append(time.perf_counter() - t0)
        same = same and na.item() == nb.item()
        pos += 1
    return ta, tb, same


def build(shape):
    hf = oracles.hf_gpt2(GPTConfig(block_size=1024, **shape), attn="eager")
    return hf, GPT.from_hf_gpt2(hf).eval()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    # lockstep rounds per (shape, length): each round decodes n tokens with
    # both models, alternating single steps, so every pair of steps sees
    # the same load; fewer at GPT-2 small, where a step takes ~100x longer
    rounds = {"tiny": {32: 10, 128: 6, 512: 3},
              "gpt2_small": {32: 3, 128: 2, 512: 1}}
    recompute_rounds = {32: 4, 128: 2, 512: 1}  # tiny only
    if args.quick:
        rounds = {k: {n: 1 for n in v} for k, v in rounds.items()}
        recompute_rounds = {n: 1 for n in recompute_rounds}
    record = {"prompt": PROMPT, "lengths": list(LENGTHS), "threads": 1,
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
            for n in LENGTHS:
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
                if shape_name == "tiny":
                    rec = [ours_recompute(ours, prompt, n)
                           for _ in range(recompute_rounds[n])]
                    steps = [s for _, st, _ in rec for s in st]
                    entry["ours_recompute"] = {
                        "step_s": [st for _, st, _ in rec],
                        "summary": latency_summary(steps)}
                record["runs"].append(entry)
                write_json(record, OUT)  # after every entry: partial runs
                print(f"{shape_name} n={n}: ours p50 "
                      f"{entry['ours']['summary']['p50'] * 1e3:.3f} ms, hf "
                      f"p50 {entry['hf']['summary']['p50'] * 1e3:.3f} ms, "
                      f"ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}] "
                      f"({time.perf_counter() - t_start:.0f} s)", flush=True)
    record["environment_end"] = environment()
    write_json(record, OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
