"""The training chapter's heavy runs; each writes results/training/NAME.json.

    python tools/training_results.py e10        # ~5 min on 2 shared cores
    python tools/training_results.py shuffled   # ~4 min
    python tools/training_results.py bigram     # ~25 min (3 seeds)
    # or one process per seed, then merge into bigram.json:
    python tools/training_results.py bigram --seeds 0   # (and 1, 2)
    python tools/training_results.py floor    # chapter 07's bound, ~30 s
    python tools/training_results.py bigram-merge
    python tools/training_results.py tiny       # the tiny preset, timed

e10: the model of the `tiny` preset overfits the first 200 training tokens,
correct and with two deliberate bugs (a detached residual update, a mask
applied after the softmax). shuffled: the same model on i.i.d. uniform
tokens, where ln V is the best possible held-out loss, correct and with the
mask bug. bigram: the transformer against the counted bigram baseline on
the whole validation stream, over three seeds. All runs use one thread.
Chapter "Training"; the bugs are the chapter's teaching versions.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]  # this checkout first

import torch  # noqa: E402

import literate  # noqa: E402
from transformer.baseline import (bigram_counts, bigram_loss,  # noqa: E402
                                  token_stream)
from transformer.bench import environment, write_json  # noqa: E402
from transformer.cli_options import parse_overrides  # noqa: E402
from transformer.training_checks import (overfit_check, overfit_config,  # noqa
                                         shuffled_config)
from transformer.model import GPTConfig  # noqa: E402
from transformer.training import (PRESETS, TrainConfig,  # noqa: E402
                                  configs_from, evaluate, heldout_losses,
                                  init_model, train)
from tool_cli import add_threads, int_at_least, parser  # noqa: E402

OUT = ROOT / "results" / "training"
ALPHA = 0.1  # the smoothing chapter 07's development set chose


# ------------------------------------------------- the two deliberate bugs
# The chapter's own definitions (chapter "Training", section "Breaking it
# on purpose"), loaded from its source so that no copy can drift.
detached_residual = literate.chapter_definition("09_training",
                                                "detached_residual")
mask_after_softmax = literate.chapter_definition("09_training",
                                                 "mask_after_softmax")


BUGS = {"correct": contextlib.nullcontext, "detached": detached_residual,
        "mask_after_softmax": mask_after_softmax}


def conditional_entropy(ids: torch.Tensor, V: int) -> float:
    """H(next | current) of the empirical bigram of `ids` (nats): the least
    loss of any predictor that sees only the current token."""
    c = bigram_counts(ids, V).double()  # (V, V)
    row = c.sum(1, keepdim=True)  # (V, 1)
    p = torch.where(c > 0, c / row.clamp(min=1), torch.ones_like(c))
    return -(c * p.log()).sum().item() / c.sum().item()


def tiny_model_config() -> GPTConfig:
    return configs_from("tiny")[0]


# ------------------------------------------------------------------- runs

def run_e10(args) -> dict:
    _, train_ids, _ = token_stream(1024)
    corpus = train_ids[:200].clone()  # (200,)
    V = tiny_model_config().vocab_size
    cfg = overfit_config(args.steps or 300, seed=0, eval_interval=10)
    out = {"corpus_tokens": len(corpus),
           "distinct_tokens": int(corpus.unique().numel()),
           "bigram_conditional_entropy": conditional_entropy(corpus, V),
           "config": cfg.__dict__, "runs": {}}
    for name, bug in BUGS.items():
        t0 = time.perf_counter()
        with bug():  # the E10 probe's measurement, with a bug planted
            r = overfit_check(0, cfg.steps, tiny_model_config(),
                              cfg.eval_interval)
        raw = r["raw"]
        out["runs"][name] = {
            "train_loss": raw["train_loss"], "val_steps": raw["val_steps"],
            "corpus_loss": raw["val_loss"],
            # the claim: loss over the whole 200-token corpus
            "final_corpus_loss": r["corpus_loss"],
            "first_step_below_0.1": next(
                (s for s, v in zip(raw["val_steps"], raw["val_loss"])
                 if v < 0.1), None),
            "wall_s": time.perf_counter() - t0}
        print(f"e10 {name}: final corpus loss {r['corpus_loss']:.4f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def run_shuffled(args) -> dict:
    V = tiny_model_config().vocab_size
    g = torch.Generator().manual_seed(1234)
    train_ids = torch.randint(0, V, (100_000,), generator=g)  # (N,)
    val_ids = torch.randint(0, V, (50_000,), generator=g)  # (M,)
    cfg = shuffled_config(args.steps or 200, seed=0, eval_interval=20,
                          eval_batches=8)
    out = {"V": V, "ln_V": math.log(V), "train_tokens": len(train_ids),
           "config": cfg.__dict__, "runs": {}}
    for name in ("correct", "mask_after_softmax"):
        t0 = time.perf_counter()
        with BUGS[name]():
            model = init_model(tiny_model_config(), 0)
            hist = train(model, train_ids, val_ids, cfg)
            full = evaluate(model, val_ids, 64, 32, None)
            # per-token losses, for the standard error of the estimate
            per_token = heldout_losses(model, val_ids, 64, 32,
                                       None).view(-1)  # (n T,)
        out["runs"][name] = {
            "train_loss": hist["train_loss"], "val_steps": hist["val_steps"],
            "val_loss": hist["val_loss"], "final_val_loss": full,
            "per_token_sd": per_token.std().item(),
            "n_tokens": per_token.numel(),
            "se": (per_token.std() / per_token.numel() ** 0.5).item(),
            "wall_s": time.perf_counter() - t0}
        print(f"shuffled {name}: val {full:.4f} vs ln V {math.log(V):.4f}",
              flush=True)
    return out


def run_bigram(args) -> dict:
    tok, train_ids, val_ids = token_stream(1024)
    model_config, train_config = configs_from("tiny",
                                              parse_overrides(args.set))
    T = model_config.block_size
    n = (len(val_ids) - 1) // T
    counts = bigram_counts(train_ids, model_config.vocab_size)
    # the bigram scored on exactly the targets the transformer is scored on
    bigram = bigram_loss(counts, val_ids[:n * T + 1], ALPHA)
    out = {"alpha": ALPHA, "bigram_val_loss": bigram, "val_targets": n * T,
           "model_config": model_config.__dict__,
           "train_config": train_config.__dict__, "seeds": {}}
    for seed in args.seeds:
        t0 = time.perf_counter()
        cfg = TrainConfig(**{**train_config.__dict__, "seed": seed})
        model = init_model(model_config, seed)
        hist = train(model, train_ids, val_ids, cfg, callback=_report)
        full = evaluate(model, val_ids, T, 32, None)
        out["seeds"][str(seed)] = {
            "train_loss": hist["train_loss"], "val_steps": hist["val_steps"],
            "val_loss": hist["val_loss"], "full_val_loss": full,
            "tokens_per_s": hist["tokens_per_s"],
            "wall_s": time.perf_counter() - t0}
        if seed == 0:  # the book's trained model (chapters 11 and 14)
            save_trained(model, tok, full, val_ids, cfg)
        print(f"bigram seed {seed}: transformer {full:.4f} vs bigram "
              f"{bigram:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def save_trained(model, tok, val_loss, val_ids, cfg) -> None:
    """results/sampling/{tiny_gpt.pt, train_tiny.json}: a checkpoint of
    the book's one format (appendix "Checkpoints") holding the weights in
    float16 (under 2 MB; they load into float32 exactly) and the
    tokenizer, and a summary."""
    import copy

    from transformer.checkpoint import save_checkpoint
    from transformer.data import load_corpus, train_val_split
    root = ROOT / "results" / "sampling"
    root.mkdir(parents=True, exist_ok=True)
    save_checkpoint(root / "tiny_gpt.pt", copy.deepcopy(model).half(),
                    step=cfg.steps, train_config=cfg, tokenizer=tok)
    _, val_text = train_val_split(load_corpus())
    record = {"source": "tools/training_results.py bigram, seed 0 (the "
              "tiny preset)", "config": model.config.__dict__,
              "steps": cfg.steps, "batch": cfg.batch_size,
              "seq": model.config.block_size, "val_loss": val_loss,
              "chars_per_token_val": len(val_text) / len(val_ids),
              "ln_V": math.log(model.config.vocab_size),
              "environment": environment()}
    write_json(record, root / "train_tiny.json")


def _report(step, hist):
    if hist["val_steps"][-1] == step:
        print(f"  step {step}: val {hist['val_loss'][-1]:.4f}", flush=True)


def merge_bigram(args) -> dict:
    """Combine bigram-SEED.json files (seeds run as separate processes)."""
    parts = [json.loads((OUT / f"bigram-{s}.json").read_text())
             for s in args.seeds]
    out = {k: v for k, v in parts[0].items() if k != "seeds"}
    out["seeds"] = {k: v for part in parts for k, v in part["seeds"].items()}
    out["environment_per_seed"] = [part["environment"] for part in parts]
    floor = json.loads((OUT / "floor.json").read_text())
    out.update({k: floor[k] for k in ("floor_bits_per_byte",
                                      "floor_nats_per_token")})
    return out


def run_floor(args) -> dict:
    """Chapter 07's entropy-floor bound, xz(validation | training), in
    nats per token of the book's tokenizer (bigram-merge reads it)."""
    from transformer.baseline import compressed_bits_per_byte
    from transformer.data import load_corpus, train_val_split
    train_text, val_text = train_val_split(load_corpus())
    _, _, val_ids = token_stream(1024)
    bpb = compressed_bits_per_byte(val_text.encode(), train_text.encode())
    bytes_per_token = len(val_text.encode()) / len(val_ids)
    return {"floor_bits_per_byte": bpb, "bytes_per_token": bytes_per_token,
            "floor_nats_per_token": bpb * math.log(2) * bytes_per_token}


def run_preset_time(args) -> dict:
    """CPU seconds per training step of each preset (one thread), and the
    whole preset's CPU time extrapolated from it. On a shared machine CPU
    time is the better estimate of the wall time on an idle one."""
    tok, train_ids, val_ids = token_stream(1024)
    out = {}
    for name, steps in (("tiny", 8), ("small", 3)):
        model_config, train_config = configs_from(name)
        cfg = TrainConfig(**{**train_config.__dict__, "steps": steps,
                             "warmup_steps": 1, "eval_batches": 1})
        model = init_model(model_config, 0)
        hist = train(model, train_ids, val_ids, cfg)
        per_step = hist["cpu_s"] / steps  # includes one small evaluation
        out[name] = {"steps_timed": steps, "cpu_s": hist["cpu_s"],
                     "wall_s": hist["wall_s"], "cpu_s_per_step": per_step,
                     "preset_steps": train_config.steps,
                     "preset_cpu_minutes": per_step * train_config.steps / 60}
        print(f"{name}: {per_step:.2f} CPU s/step -> "
              f"{out[name]['preset_cpu_minutes']:.1f} CPU min", flush=True)
    # the wall time of tiny with two threads, the machine's whole width
    model_config, train_config = configs_from("tiny")
    cfg = TrainConfig(**{**train_config.__dict__, "steps": 16,
                         "warmup_steps": 1, "eval_batches": 1})
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train(init_model(model_config, 0), train_ids, val_ids,
              TrainConfig(**{**cfg.__dict__, "steps": 2}))  # warm-up
        hist = train(init_model(model_config, 0), train_ids, val_ids, cfg)
    finally:
        torch.set_num_threads(before)
    per_step = hist["wall_s"] / cfg.steps
    out["tiny"].update(wall_s_per_step_2_threads=per_step,
                       preset_wall_minutes_2_threads=(
                           per_step * train_config.steps / 60),
                       loadavg=list(os.getloadavg()))
    print(f"tiny, 2 threads: {per_step:.3f} s/step -> "
          f"{out['tiny']['preset_wall_minutes_2_threads']:.1f} min",
          flush=True)
    return out


def run_tiny(args) -> dict:
    """The `tiny` preset exactly as `python -m transformer train` runs it."""
    model_config, train_config = configs_from("tiny")
    _, train_ids, val_ids = token_stream(model_config.vocab_size)
    t0 = time.perf_counter()
    model = init_model(model_config, train_config.seed)
    hist = train(model, train_ids, val_ids, train_config)
    return {"preset": PRESETS["tiny"], "history": hist,
            "wall_s": time.perf_counter() - t0}


RUNS = {"e10": run_e10, "shuffled": run_shuffled, "bigram": run_bigram,
        "bigram-merge": merge_bigram, "floor": run_floor, "preset-time": run_preset_time,
        "tiny": run_tiny}


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("run", choices=sorted(RUNS))
    p.add_argument("--steps", type=int_at_least(1), default=None,
                   metavar="N", help="e10, shuffled: training steps "
                   "(default: 300, 200)")
    p.add_argument("--seeds", type=int_at_least(0), nargs="+",
                   default=[0, 1, 2], metavar="S",
                   help="bigram, bigram-merge: seeds (default: 0 1 2)")
    p.add_argument("--set", action="append", default=[],
                   metavar="FIELD=VALUE", help="bigram: preset overrides")
    add_threads(p)
    args = p.parse_args(argv)
    try:  # before any work: a bad --set is bad input, not a traceback
        parse_overrides(args.set)
    except ValueError as e:
        p.error(str(e))
    torch.set_num_threads(args.threads)
    env = environment()
    t0 = time.perf_counter()
    record = RUNS[args.run](args)
    record.update(environment=env, wall_s_total=time.perf_counter() - t0,
                  loadavg_end=list(os.getloadavg()))
    name = args.run
    if name == "bigram" and len(args.seeds) == 1:  # one seed per process
        name = f"bigram-{args.seeds[0]}"
    elif name == "bigram-merge":
        name = "bigram"
    print(f"wrote {write_json(record, OUT / f'{name}.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
