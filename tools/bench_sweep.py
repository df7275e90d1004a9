"""Many models at once against one model at a time, at the experiments'
own shapes.

    nice -n 5 python tools/bench_sweep.py [--rounds 7] [--compile recall]
        [--out results/bench/sweep.json]

Shapes, read from the experiment declarations (transformer.experiments),
not typed here:
  ablation  E4's model and recipe (the shared byte-level ablation shape),
            K = its number of seeds;
  deep      E6's narrow deep model at its deepest stratum, pre-norm,
            K = its number of seeds;
  recall    E15's attention arm (RECALL_MODEL at the recall task's
            vocabulary and length, its batch size), K = its seeds; trained
            here on the language-model loss over a byte stream reduced to
            its vocabulary, since train_many takes windows of a stream.
For each shape, interleaved rounds (the order alternating) time:
  one       transformer.training.train of one model for S steps (today's
            runner: one model per process, eager), and
  batched   transformer.sweep.train_many of K models for S steps;
one thread, tokens per second of the training steps (hist["train_s"]:
evaluation and set-up excluded for both). speedup = tokens/s per core of
batched over one: p50 over rounds with a paired bootstrap interval
(transformer.bench.ratio_of_medians_ci). The run also records the
one-thread float32 matmul rate at each shape's widest product, the aten
operations per training step of each path (counted with a dispatch mode),
the training matmul FLOPs per step (3 x transformer.cost_model's forward
FLOPs), the load average before and after, and, with --compile SHAPE,
torch.compile of the batched loss at that shape: compile time and the
steady-state step time against the eager batched step. Chapter "Backward
passes by hand", section "Many models at once".
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformer import ablations as ex  # noqa: E402
from transformer.baseline import token_stream  # noqa: E402
from transformer.bench import (environment, ratio_of_medians_ci,  # noqa
                               write_json)
from transformer.cost_model import forward_flops  # noqa: E402
from transformer.model import GPTConfig  # noqa: E402
from transformer.recall import (RECALL_MODEL, RECALL_RUN,  # noqa: E402
                               RECALL_TASK)
from transformer.sweep import StackedAdamW, StackedGPT, clip_per_model  # noqa
from transformer.sweep import train_many  # noqa: E402
from transformer.training import TrainConfig, init_model, train  # noqa
from tool_cli import add_out, int_at_least, parser  # noqa: E402  (tools/)


def shapes() -> dict:
    """name -> (GPTConfig, TrainConfig of seed 0, K, steps per unit)."""
    out = {}
    e4 = ex.EXPERIMENTS["E4"]
    mc, cfg = e4.configs(None, "learned", 0)
    out["ablation"] = (mc, cfg, len(e4.seeds), 6)
    e6 = ex.EXPERIMENTS["E6"]
    mc, cfg = e6.configs(max(e6.strata), "pre", 0)
    out["deep"] = (mc, cfg, len(e6.seeds), 3)
    task, run = RECALL_TASK, RECALL_RUN
    mc = GPTConfig(vocab_size=task["n_keys"] + task["n_values"],
                   block_size=2 * task["n_pairs"], **RECALL_MODEL)
    cfg = TrainConfig(steps=run["steps"], batch_size=run["batch_size"],
                      lr=run["lr"], min_lr=run["lr"] / 10,
                      warmup_steps=run["warmup_steps"],
                      grad_clip=run["grad_clip"], weight_decay=0.0,
                      beta2=0.999, checkpoint_interval=0)
    out["recall"] = (mc, cfg, len(ex.EXPERIMENTS["E15"].seeds), 12)
    return out


def unit_config(cfg: TrainConfig, seed: int, steps: int) -> TrainConfig:
    """The shape's recipe, S steps, evaluated only at the ends (once on
    one batch), seed `seed`."""
    import dataclasses
    return dataclasses.replace(cfg, steps=steps, seed=seed,
                               warmup_steps=min(cfg.warmup_steps, steps),
                               eval_interval=10 ** 6, eval_batches=1,
                               checkpoint_interval=0)


def run_one(mc, cfg, steps, data) -> float:
    """Tokens per second of one model trained alone by `train`."""
    h = train(init_model(mc, 0), data[0], data[1],
              unit_config(cfg, 0, steps))
    return h["tokens"] / h["train_s"]


def run_batched(mc, cfg, K, steps, data) -> float:
    """Tokens per second, all K models, of train_many."""
    hs = train_many([(mc, unit_config(cfg, s, steps)) for s in range(K)],
                    data[0], data[1])
    return sum(h["tokens"] for h in hs) / hs[0]["train_s"]


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def ops_per_step(fn) -> int:
    """aten operations of one training step: fn(steps) run with 2 steps
    minus with 1 (the evaluations at both ends cancel)."""
    counts = []
    for steps in (1, 2):
        with _Count() as c:
            fn(steps)
        counts.append(c.n)
    return counts[1] - counts[0]


def matmul_rate(M: int, K: int, N: int, repeat: int = 50) -> float:
    """One-thread float32 FLOP/s of an (M, K) @ (K, N) product, from the
    fastest of `repeat` calls."""
    a, b = torch.randn(M, K), torch.randn(K, N)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    # the fastest repeat: the rate the core reaches when it is not shared
    return 2 * M * K * N / min(times)


def compiled_step(mc, cfg, K, data, rounds: int, steps: int) -> dict:
    """torch.compile of StackedGPT.losses (forward and backward) inside the
    batched step, against the same step eager: compile time and the
    ratio of steady-state step times (p50, paired bootstrap)."""
    from transformer.baseline import get_batch
    models = [init_model(mc, s) for s in range(K)]
    stack = StackedGPT(models)
    params = [stack.params[n] for n in stack.names]
    cfgs = [unit_config(cfg, s, steps) for s in range(K)]
    opt = StackedAdamW(stack.params, cfgs)
    gen = torch.Generator().manual_seed(0)
    T = mc.block_size

    def step(fn):
        xs = [get_batch(data[0], cfg.batch_size, T, gen) for _ in range(K)]
        X = torch.stack([x for x, _ in xs])  # (K, B, T)
        Y = torch.stack([y for _, y in xs])  # (K, B, T)
        t0 = time.perf_counter()
        losses = fn(X, Y)  # (K,)
        for p in params:
            p.grad = None
        losses.sum().backward()
        clip_per_model(params, [c.grad_clip for c in cfgs])
        opt.step([1e-3] * K, [True] * K)
        return time.perf_counter() - t0

    compiled = torch.compile(stack.losses)
    first = step(compiled)
    eager_s, comp_s = [], []
    for r in range(rounds):
        for name in (("eager", "compiled") if r % 2 == 0
                     else ("compiled", "eager")):
            fn = compiled if name == "compiled" else stack.losses
            t = sorted(step(fn) for _ in range(steps))[steps // 2]
            (comp_s if name == "compiled" else eager_s).append(t)
    ratio, lo, hi = ratio_of_medians_ci(eager_s, comp_s)
    p50, eager = statistics.median(comp_s), statistics.median(eager_s)
    saved = eager - p50  # seconds per step; <= 0: compiling never pays
    return {"K": K, "first_step_s": first, "compile_s": first - p50,
            "eager_step_s": eager_s, "compiled_step_s": comp_s,
            "speedup": [ratio, lo, hi],
            "breakeven_steps": (first - p50) / saved if saved > 0
            else None}


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--rounds", type=int_at_least(2), default=7, metavar="N",
                   help="interleaved rounds per shape (default: %(default)s)")
    p.add_argument("--shapes", nargs="*", default=None)
    p.add_argument("--compile", default="recall",
                   help="shape whose batched step is also compiled, or "
                        "'none'")
    add_out(p, str(ROOT / "results" / "bench" / "sweep.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    all_shapes = shapes()
    names = args.shapes or list(all_shapes)
    unknown = set(names) - set(all_shapes)
    if unknown:
        p.error(f"argument --shapes: unknown {sorted(unknown)}; expected "
                f"some of {list(all_shapes)}")
    env = environment()
    load_before = list(os.getloadavg())
    _, train_ids, val_ids = token_stream(ex.BYTE_VOCAB_SIZE)
    record = {"shapes": {}, "environment": env}
    for name in names:
        mc, cfg, K, steps = all_shapes[name]
        V = mc.vocab_size
        data = (train_ids[:200_000] % V, val_ids[:20_000] % V)
        B, T, D = cfg.batch_size, mc.block_size, mc.n_embd
        flops = 3 * forward_flops(T, B, mc)["total"]  # per model-step
        rate = matmul_rate(B * T, D, mc.ffn_dim)
        n_one = ops_per_step(lambda s: train(
            init_model(mc, 0), *data, unit_config(cfg, 0, s)))
        n_many = ops_per_step(lambda s: train_many(
            [(mc, unit_config(cfg, k, s)) for k in range(K)], *data))
        run_one(mc, cfg, 1, data)  # warm both paths once
        run_batched(mc, cfg, K, 1, data)
        one, many = [], []
        for r in range(args.rounds):
            order = ("one", "batched") if r % 2 == 0 else ("batched", "one")
            for arm in order:
                if arm == "one":
                    one.append(run_one(mc, cfg, steps, data))
                else:
                    many.append(run_batched(mc, cfg, K, steps, data))
            print(f"{name} round {r + 1}: one {one[-1]:,.0f} tok/s, "
                  f"batched K={K} {many[-1]:,.0f} tok/s", flush=True)
        # speedup = (1 / one) / (1 / many) on seconds per token
        speedup = ratio_of_medians_ci([1 / x for x in one],
                                      [1 / x for x in many])
        p50 = {a: statistics.median(v) for a, v in (("one", one),
                                                    ("batched", many))}
        record["shapes"][name] = {
            "speedup": list(speedup), "K": K, "steps_per_unit": steps,
            "model": {k: getattr(mc, k) for k in (
                "vocab_size", "block_size", "n_layer", "n_head", "n_embd",
                "pos_encoding", "norm_position")},
            "batch_size": B, "tokens_per_s": {"one": one, "batched": many},
            "p50_tokens_per_s": p50,
            "train_flops_per_step": flops,
            "matmul_rate_flops": rate,
            "matmul_shape": [B * T, D, mc.ffn_dim],
            "fraction_of_matmul_rate": {
                a: v / (B * T) * flops / rate for a, v in p50.items()},
            "ops_per_step": {"one": n_one, "batched": n_many}}
        print(f"{name}: speedup {speedup[0]:.2f} [{speedup[1]:.2f}, "
              f"{speedup[2]:.2f}]", flush=True)
    if args.compile != "none" and args.compile in all_shapes:
        mc, cfg, K, _ = all_shapes[args.compile]
        V = mc.vocab_size
        data = (train_ids[:200_000] % V, val_ids[:20_000] % V)
        t0 = time.perf_counter()
        res = compiled_step(mc, cfg, K, data, max(2, args.rounds // 2), 5)
        res["shape"], res["wall_s"] = args.compile, time.perf_counter() - t0
        record["compiled"] = res
        print(f"compiled {args.compile}: compile {res['compile_s']:.1f} s, "
              f"speedup {res['speedup'][0]:.2f} [{res['speedup'][1]:.2f}, "
              f"{res['speedup'][2]:.2f}]", flush=True)
    env["loadavg_before"], env["loadavg_after"] = (load_before,
                                                   list(os.getloadavg()))
    env["rounds"] = args.rounds
    env["nice"] = os.nice(0)
    write_json(record, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
