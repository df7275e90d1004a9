"""Per-token decode latency with and without the KV cache (E11), ours
against Hugging Face GPT2LMHeadModel with its cache, interleaved.

Both models have the same random weights (GPT.from_hf_gpt2), run greedy
decoding in the same hand-written loop (one forward per token, arg-max),
with torch.set_num_threads(1). Every decode step is timed on its own, so a
run of N new tokens gives N per-token latencies; the prompt's forward (the
prefill) is timed separately. Rounds alternate which model goes first.

Writes results/kv_cache/decode_latency.json. Run time about 10 minutes on
a busy 2-core machine; --quick for a smoke test.

A point measured with only one round per model cannot be interleaved
fairly (the load can change between the two runs); --lockstep SHAPE:N
re-measures it with the two models alternating single decode steps.

Usage: .venv/bin/python tools/bench_kv_cache.py [--quick]
       .venv/bin/python tools/bench_kv_cache.py --lockstep gpt2_small:512
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from transformer.bench import (environment, latency_summary,  # noqa: E402
                               ratio_of_medians_ci, write_json)
from transformer.kv_cache import make_caches  # noqa: E402
from transformer.model import GPT  # noqa: E402

OUT = (Path(__file__).resolve().parent.parent / "results" / "kv_cache"
       / "decode_latency.json")
SHAPES = {
    "tiny": dict(vocab_size=1024, n_layer=4, n_head=4, n_embd=128),
    "gpt2_small": dict(vocab_size=50257, n_layer=12, n_head=12, n_embd=768),
}
PROMPT = 16
LENGTHS = (32, 128, 512)


def ours_cached(model, prompt, n):
    """Greedy decode of n tokens with our KVCache; per-step seconds."""
    caches = make_caches(model, 1, prompt.shape[1] + n)
    t0 = time.perf_counter()
    logits, _ = model(prompt, caches=caches)  # (1, T0, V)
    nxt = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    prefill = time.perf_counter() - t0
    steps, toks = [], [nxt.item()]
    pos = prompt.shape[1]
    for _ in range(n - 1):
        t0 = time.perf_counter()
        logits, _ = model(nxt, start_pos=pos, caches=caches)  # (1, 1, V)
        nxt = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        steps.append(time.perf_counter() - t0)
        toks.append(nxt.item())
        pos += 1
    return prefill, steps, toks


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


def hf_cached(hf, prompt, n):
    """The same loop for Hugging Face's model and its own cache."""
    t0 = time.perf_counter()
    out = hf(input_ids=prompt, use_cache=True)
    past = out.past_key_values
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    prefill = time.perf_counter() - t0
    steps, toks = [], [nxt.item()]
    for _ in range(n - 1):
        t0 = time.perf_counter()
        out = hf(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        steps.append(time.perf_counter() - t0)
        toks.append(nxt.item())
    return prefill, steps, toks


def lockstep(ours, hf, prompt, n):
    """Both models decode n tokens greedily in lockstep, one step of ours,
    then one of Hugging Face's, alternating which goes first: every pair
    of steps sees the same machine load. Returns both per-step lists."""
    caches = make_caches(ours, 1, prompt.shape[1] + n)
    a, _ = ours(prompt, caches=caches)  # (1, T0, V)
    out = hf(input_ids=prompt, use_cache=True)
    na = a[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    nb = out.logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    past, pos = out.past_key_values, prompt.shape[1]
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


def redo_lockstep(shape_name, n):
    """Replace one (shape, n) entry of the JSON by a lockstep measurement
    (used where one round per model cannot be interleaved fairly)."""
    record = json.loads(OUT.read_text())
    hf, ours = build(SHAPES[shape_name])
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, SHAPES[shape_name]["vocab_size"], (1, PROMPT),
                           generator=g)  # (1, T0)
    with torch.no_grad():
        lockstep(ours, hf, prompt, 8)  # warm-up
        ta, tb, same = lockstep(ours, hf, prompt, n)
    ratio, lo, hi = ratio_of_medians_ci(ta, tb)
    entry = {"shape": shape_name, "config": SHAPES[shape_name], "n_new": n,
             "order": "lockstep: alternating single decode steps",
             "loadavg": list(os.getloadavg()),
             "ours": {"step_s": [ta], "summary": latency_summary(ta)},
             "hf": {"step_s": [tb], "summary": latency_summary(tb)},
             "ratio_ours_over_hf": [ratio, lo, hi], "same_tokens": same,
             "environment": environment()}
    old = [r for r in record["runs"]
           if (r["shape"], r["n_new"]) == (shape_name, n)]
    record.setdefault("replaced_by_lockstep", []).extend(old)
    record["runs"] = [r for r in record["runs"]
                      if (r["shape"], r["n_new"]) != (shape_name, n)]
    record["runs"].append(entry)
    write_json(record, OUT)
    print(f"{shape_name} n={n} lockstep: ours p50 "
          f"{entry['ours']['summary']['p50'] * 1e3:.3f} ms, hf p50 "
          f"{entry['hf']['summary']['p50'] * 1e3:.3f} ms, ratio "
          f"{ratio:.3f} [{lo:.3f}, {hi:.3f}]")


def build(shape):
    torch.manual_seed(0)
    cfg = GPT2Config(n_positions=1024, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     **shape)
    hf = GPT2LMHeadModel(cfg).eval()
    return hf, GPT.from_hf_gpt2(hf).eval()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--lockstep", metavar="SHAPE:N",
                    help="only re-measure this point in lockstep, e.g. "
                    "gpt2_small:512, and replace it in the JSON")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.lockstep:
        shape_name, n = args.lockstep.split(":")
        redo_lockstep(shape_name, int(n))
        return 0
    # rounds per (shape, length); fewer at GPT-2 small, where one round of
    # 512 tokens takes tens of seconds per model
    rounds = {"tiny": {32: 10, 128: 6, 512: 3},
              "gpt2_small": {32: 3, 128: 2, 512: 1}}
    recompute_rounds = {32: 4, 128: 2, 512: 1}  # tiny only
    if args.quick:
        rounds = {k: {n: 2 for n in v} for k, v in rounds.items()}
        recompute_rounds = {n: 1 for n in recompute_rounds}
    record = {"prompt": PROMPT, "lengths": list(LENGTHS), "threads": 1,
              "environment": environment(), "runs": []}
    t_start = time.perf_counter()
    for shape_name, shape in SHAPES.items():
        hf, ours = build(shape)
        g = torch.Generator().manual_seed(1)
        prompt = torch.randint(0, shape["vocab_size"], (1, PROMPT),
                               generator=g)  # (1, T0)
        with torch.no_grad():
            for fn in (ours_cached, hf_cached):  # warm-up
                fn(ours if fn is ours_cached else hf, prompt, 8)
            for n in LENGTHS:
                res = {"ours": [], "hf": []}
                for r in range(rounds[shape_name][n]):
                    order = ["ours", "hf"] if r % 2 == 0 else ["hf", "ours"]
                    for who in order:
                        if who == "ours":
                            res[who].append(ours_cached(ours, prompt, n))
                        else:
                            res[who].append(hf_cached(hf, prompt, n))
                entry = {"shape": shape_name, "config": shape, "n_new": n,
                         "loadavg": list(os.getloadavg())}
                for who in ("ours", "hf"):
                    steps = [s for _, st, _ in res[who] for s in st]
                    entry[who] = {
                        "prefill_s": [p for p, _, _ in res[who]],
                        "step_s": [st for _, st, _ in res[who]],
                        "summary": latency_summary(steps),
                        "run_medians_s": [
                            latency_summary(st)["p50"]
                            for _, st, _ in res[who]]}
                ratio, lo, hi = ratio_of_medians_ci(
                    entry["ours"]["run_medians_s"],
                    entry["hf"]["run_medians_s"])
                entry["ratio_ours_over_hf"] = [ratio, lo, hi]
                entry["same_tokens"] = (res["ours"][0][2]
                                        == res["hf"][0][2])
                if shape_name == "tiny":
                    rec = [ours_recompute(ours, prompt, n)
                           for _ in range(recompute_rounds[n])]
                    steps = [s for _, st, _ in rec for s in st]
                    entry["ours_recompute"] = {
                        "step_s": [st for _, st, _ in rec],
                        "summary": latency_summary(steps)}
                    entry["recompute_same_tokens"] = (rec[0][2]
                                                      == res["ours"][0][2])
                record["runs"].append(entry)
                write_json(record, OUT)  # after every entry: partial runs
                print(f"{shape_name} n={n}: ours p50 "
                      f"{entry['ours']['summary']['p50'] * 1e3:.3f} ms, "
                      f"hf p50 {entry['hf']['summary']['p50'] * 1e3:.3f} "
                      f"ms, ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}] "
                      f"({time.perf_counter() - t_start:.0f} s)",
                      flush=True)
        del hf, ours
    record["seconds_total"] = time.perf_counter() - t_start
    record["environment_end"] = environment()
    write_json(record, OUT)
    print(f"wrote {OUT} in {record['seconds_total']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
