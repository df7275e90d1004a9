"""Training throughput: the book's GPT against the platform kernels and
Hugging Face GPT-2, same shape.

    python tools/bench_training.py [--threads 1] [--repeat 8] [--profile]
    python tools/bench_training.py --shapes preset_tiny \
        --impls ours_before ours ours_compiled --out PATH

For each shape (4 layers x width 128 at batch 16 x 256, and 6 layers x
width 384 at batch 8 x 256, vocabulary 1024; `preset_tiny` is the `tiny`
training preset's step, batch 16 x 128), times one full training step
(forward, backward, clip, AdamW update) of each implementation, interleaved
round by round in a rotating order:
  ours               transformer.GPT stepped by the package's own training
                     step (transformer.training.step_function: the loop
                     `train` runs, AdamW and clipping included), with the
                     fused kernels of chapter "Backward passes by hand";
  ours_reference     the same with fused=False: the teaching code;
  ours_compiled      ours through transformer.model.compile_model
                     (torch.compile of the book's own code, opt-in);
  ours_before        ours with transformer/kernels.py as it was at commit
                     BEFORE (loaded from git), for before/after figures;
  platform           tools/platform_gpt.py: the same architecture with
                     nn.Linear, SDPA, F.layer_norm, F.gelu, F.cross_entropy
                     and torch.optim.AdamW, the way the popular minimal GPT
                     codebases write it; platform_compiled: the same through
                     torch.compile;
  hf_sdpa, hf_eager  HF GPT2LMHeadModel with attn_implementation "sdpa" and
                     "eager".
The non-book implementations use torch.optim.AdamW and torch's
clip_grad_norm_. The first step of each is timed on its own
(`first_step_s`: for the compiled ones, compilation). The script also
measures the float32 matmul peak at the same thread count and reports
model-FLOPs utilisation (MFU): training FLOPs (3 x the forward matmul FLOPs
of transformer.cost_model.forward_flops, full score matrix counted for
every implementation) per second over that peak. --profile adds
torch.profiler's top operations per step for ours, ours_compiled and
platform. Writes results/training/bench_training.json by default.
Chapters "Backward passes by hand" (section "Measured: training speed")
and "Training" (section "Performance").
"""
from __future__ import annotations

import os
import sys
import tempfile

# a cold compiler cache, so that `first_step_s` of a compiled model is the
# compile a new user waits for (set before torch is imported; --warm-cache
# keeps the user's cache instead)
if "--warm-cache" not in sys.argv:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(
        prefix="inductor-cold-")

import gc
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tools"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402

from transformer.bench import (environment, latency_summary,  # noqa: E402
                               ratio_of_medians_ci, write_json)
from transformer.cost_model import forward_flops  # noqa: E402
from transformer.model import GPT, GPTConfig  # noqa: E402
from transformer.training import (PRESETS, TrainConfig,  # noqa: E402
                                  step_function)
from tool_cli import add_out, add_threads, add_timing, parser  # noqa: E402

_TINY_MODEL, _TINY_RUN = PRESETS["tiny"]  # the shape, read, not retyped
_TINY = {k: _TINY_MODEL[k] for k in ("n_layer", "n_head", "n_embd")}
SHAPES = {
    "tiny": dict(_TINY, B=16, T=256),
    "small": dict(n_layer=6, n_head=6, n_embd=384, B=8, T=256),
    # the `tiny` training preset's step (transformer.training.PRESETS)
    "preset_tiny": dict(_TINY, B=_TINY_RUN["batch_size"],
                        T=_TINY_MODEL["block_size"]),
}
V = _TINY_MODEL["vocab_size"]


def matmul_peak(threads: int, n: int = 1024, repeat: int = 15) -> dict:
    """float32 (n, n) @ (n, n): FLOP/s per sample; the peak is the best."""
    a = torch.randn(n, n)  # (n, n)
    b = torch.randn(n, n)  # (n, n)
    for _ in range(3):
        a @ b
    rates = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        rates.append(2 * n ** 3 / (time.perf_counter() - t0))
    rates.sort()
    return {"n": n, "threads": threads, "flops_per_s": rates,
            "peak_flops_per_s": rates[-1],
            "median_flops_per_s": rates[len(rates) // 2]}


def ours_step(shape: dict, fused: bool = True, compiled: bool = False):
    cfg = GPTConfig(vocab_size=V, block_size=shape["T"],
                    n_layer=shape["n_layer"], n_head=shape["n_head"],
                    n_embd=shape["n_embd"], fused=fused)
    torch.manual_seed(0)
    model = GPT(cfg)
    # the package's own step (transformer.training.step_function): the
    # loop `train` runs, with its schedule, clip and AdamW, at a constant
    # learning rate (warm-up 0, minimum = peak) over a fixed batch
    train = TrainConfig(steps=10**9, batch_size=shape["B"], lr=1e-4,
                        min_lr=1e-4, warmup_steps=0, weight_decay=0.1,
                        grad_clip=1.0, beta1=0.9, beta2=0.95)
    x, y = _batch(shape)
    return step_function(model, train, lambda gen: (x, y), compile=compiled)


BEFORE = "bb5906a"  # the last commit before this round of speed work


def kernels_at(rev: str):
    """transformer/kernels.py as it was at git revision `rev`, loaded as a
    module of its own (chapter "Backward passes by hand", earlier)."""
    import subprocess
    import types
    source = subprocess.run(["git", "show", f"{rev}:transformer/kernels.py"],
                            cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    module = types.ModuleType(f"kernels_{rev}")
    exec(compile(source, f"kernels@{rev}", "exec"), module.__dict__)
    return module


def before_step(shape: dict, rev: str = BEFORE):
    """ours_step with the kernels of revision `rev`: the model is built and
    every step runs with transformer.model.kernels pointing at them."""
    import transformer.model as model_module
    old, now = kernels_at(rev), model_module.kernels
    model_module.kernels = old
    try:
        step = ours_step(shape)
    finally:
        model_module.kernels = now

    def run():
        model_module.kernels = old
        try:
            step()
        finally:
            model_module.kernels = now
    return run


def platform_step(shape: dict, compiled: bool = False):
    from platform_gpt import PlatformGPT
    torch.manual_seed(0)
    model = PlatformGPT(V, shape["T"], shape["n_layer"], shape["n_head"],
                        shape["n_embd"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95),
                            weight_decay=0.1)
    run = torch.compile(model) if compiled else model
    return _stepper(model, opt, lambda x, y: run(x, y)[1], lambda: torch.nn.
                    utils.clip_grad_norm_(model.parameters(), 1.0), shape)


def hf_step(shape: dict, attn: str):
    from oracles import hf_gpt2
    model = hf_gpt2(GPTConfig(vocab_size=V, block_size=shape["T"],
                              n_layer=shape["n_layer"],
                              n_head=shape["n_head"],
                              n_embd=shape["n_embd"]), attn=attn)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95),
                            weight_decay=0.1)

    def loss_of(x, y):  # logits -> the same mean cross-entropy as ours
        logits = model(input_ids=x).logits  # (B, T, V)
        return torch.nn.functional.cross_entropy(logits.view(-1, V),
                                                 y.view(-1))

    return _stepper(model, opt, loss_of, lambda: torch.nn.utils.
                    clip_grad_norm_(model.parameters(), 1.0), shape)


def _batch(shape: dict):
    """The one fixed batch every implementation steps on: (x, y), (B, T)
    each."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, V, (shape["B"], shape["T"]), generator=g)  # (B, T)
    y = torch.randint(0, V, (shape["B"], shape["T"]), generator=g)  # (B, T)
    return x, y


def _stepper(model, opt, loss_of, clip, shape):
    x, y = _batch(shape)
    model.train()

    def step():
        loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip()
        opt.step()
    return step


IMPLS = {"ours": lambda s: ours_step(s),
         "ours_before": before_step,
         "ours_reference": lambda s: ours_step(s, fused=False),
         "ours_compiled": lambda s: ours_step(s, compiled=True),
         "platform": platform_step,
         "platform_compiled": lambda s: platform_step(s, compiled=True),
         "hf_sdpa": lambda s: hf_step(s, "sdpa"),
         "hf_eager": lambda s: hf_step(s, "eager")}


def profile_steps(impls: dict, names, steps: int = 2, top: int = 15) -> dict:
    """Where one step's time goes, by operation: torch.profiler's self CPU
    time per step of the `top` most expensive operations of each
    implementation, profiled one after the other, plus the share of all
    self time spent in matrix products (mm, addmm, bmm, baddbmm)."""
    from torch.profiler import ProfilerActivity, profile
    out = {}
    for k in names:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                impls[k]()
        rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        total = sum(e.self_cpu_time_total for e in rows)  # microseconds
        matmul = sum(e.self_cpu_time_total for e in rows if e.key in (
            "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"))
        out[k] = {"self_ms_per_step": total / 1e3 / steps,
                  "matmul_share": matmul / total,
                  "top": [{"op": e.key, "calls_per_step": e.count / steps,
                           "self_ms_per_step":
                           e.self_cpu_time_total / 1e3 / steps}
                          for e in rows[:top]]}
    return out


def run_shape(name: str, shape: dict, repeat: int, warmup: int,
              names=None, profile: bool = False) -> dict:
    names = list(names or IMPLS)
    impls = {k: IMPLS[k](shape) for k in names}
    first = {}
    for k in names:  # the first step compiles, where there is a compiler
        t0 = time.perf_counter()
        impls[k]()
        first[k] = time.perf_counter() - t0
    for _ in range(warmup - 1):
        for fn in impls.values():
            fn()
    times = {k: [] for k in names}
    gc.collect()
    gc.disable()
    try:
        for r in range(repeat):
            i = r % len(names)
            order = names[i:] + names[:i]  # rotate who goes first
            for k in order:
                t0 = time.perf_counter()
                impls[k]()
                times[k].append(time.perf_counter() - t0)
    finally:
        gc.enable()
    tokens = shape["B"] * shape["T"]
    cfg = dict(vocab_size=V, block_size=shape["T"], n_layer=shape["n_layer"],
               n_head=shape["n_head"], n_embd=shape["n_embd"])
    train_flops = 3 * forward_flops(shape["T"], shape["B"], cfg)["total"]
    out = {"shape": shape, "tokens_per_step": tokens,
           "train_flops_per_step": train_flops, "impls": {}}
    for k in names:
        s = latency_summary(times[k])
        out["impls"][k] = {"samples_s": times[k], "summary": s,
                           "first_step_s": first[k],
                           "tokens_per_s": tokens / s["p50"],
                           "flops_per_s": train_flops / s["p50"]}
    for k in names:
        if k.startswith("ours"):
            continue
        for mine in ("ours", "ours_compiled"):
            if mine in times:  # time(theirs) / time(mine) = speed ratio
                ratio, lo, hi = ratio_of_medians_ci(times[k], times[mine])
                key = "speed_vs_" + k if mine == "ours" else \
                    "compiled_speed_vs_" + k
                out[key] = {"ratio": ratio, "ci": [lo, hi]}
    if "ours_reference" in times:
        ratio, lo, hi = ratio_of_medians_ci(times["ours_reference"],
                                            times["ours"])
        out["speedup_vs_reference"] = {"ratio": ratio, "ci": [lo, hi]}
    if profile:
        out["profile"] = profile_steps(impls, [k for k in (
            "ours", "ours_compiled", "platform") if k in impls])
    return out


def main(argv=None) -> int:
    p = parser(__doc__)
    add_threads(p)
    add_timing(p, warmup=2, repeat=8, what="training steps")
    p.add_argument("--shapes", nargs="*", default=["tiny", "small"],
                   choices=list(SHAPES))
    p.add_argument("--impls", nargs="*", choices=list(IMPLS),
                   default=[k for k in IMPLS if k != "ours_before"])
    p.add_argument("--profile", action="store_true",
                   help="also record torch.profiler's top operations")
    p.add_argument("--warm-cache", action="store_true",
                   help="keep torch.compile's on-disk cache (default: a "
                   "fresh one, so compile times are cold)")
    add_out(p, str(ROOT / "results" / "training" / "bench_training.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    record = {"threads": args.threads, "repeat": args.repeat,
              "impls": args.impls, "compile_cache": "warm" if
              args.warm_cache else "cold", "environment_before": environment()}
    if "ours_before" in args.impls:
        record["before_revision"] = BEFORE
    record["matmul_before"] = matmul_peak(args.threads)
    record["shapes"] = {}
    for name in args.shapes:
        t0 = time.perf_counter()
        record["shapes"][name] = run_shape(name, SHAPES[name], args.repeat,
                                           args.warmup, args.impls,
                                           args.profile)
        r = record["shapes"][name]
        print(f"{name}: " + ", ".join(
            f"{k} {v['tokens_per_s']:,.0f} tokens/s"
            for k, v in r["impls"].items())
            + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    record["matmul_after"] = matmul_peak(args.threads)
    peak = max(record["matmul_before"]["peak_flops_per_s"],
               record["matmul_after"]["peak_flops_per_s"])
    record["peak_flops_per_s"] = peak
    for r in record["shapes"].values():
        for v in r["impls"].values():
            v["mfu"] = v["flops_per_s"] / peak
    record["environment_after"] = environment()
    record["loadavg"] = [record["environment_before"]["loadavg"],
                         record["environment_after"]["loadavg"]]
    print(f"matmul peak {peak / 1e9:.1f} GFLOP/s; wrote "
          f"{write_json(record, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
