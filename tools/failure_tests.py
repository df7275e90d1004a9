"""Failure tests: the probes of chapter "Ablations" run with a deliberate bug
applied, to show that each measurement catches what it claims to catch.

    python tools/failure_tests.py e13      # ~5 min on 2 shared cores (6 runs)
    python tools/failure_tests.py e12-hf   # ~1.5 min: E12 against HF GPT-2
    python tools/failure_tests.py all

e13: E13 (`transformer.probes.measure_unpredictable_targets`, uniformly random tokens,
V = 4) for every seed of its declaration, once with the mask applied after
the softmax and once with a loader whose targets are not shifted (y = x).
The bugs are the training chapter's teaching definitions, loaded from its
source with `literate.chapter_definition`: the package never contains one.
The correct model's records are E13's own, written by
`python -m transformer experiment E13`.

e12-hf: the independent half of E12. Hugging Face's GPT-2 with the tiny
preset's shape (`tools/oracles.hf_gpt2`) generates greedily at E12's
shapes; the bytes of the tensors its DynamicCache holds afterwards are set
against `transformer.cost_model.kv_cache_bytes` at the positions it filled
(it grows by concatenation, so it allocates no more than it fills).

Each writes raw JSON under results/experiments/failure_tests/, with the
predictions it was run against, written before the runs. One thread.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]  # this checkout first

import torch  # noqa: E402

import literate  # noqa: E402
from tool_cli import parser  # noqa: E402
from transformer.bench import environment, write_json  # noqa: E402
from transformer.ablations import EXPERIMENTS  # noqa: E402
from transformer.probes import (E12_SHAPES,  # noqa: E402
                                measure_unpredictable_targets)
from transformer.training_checks import (E13_CAUGHT, LEAK_MODEL,  # noqa: E402
                                         e13_verdict, tiny_model_config)

OUT = ROOT / "results" / "experiments" / "failure_tests"

# The bugs, as the training chapter defines them (section "Breaking it on
# purpose"); each is a context manager that patches the package while open.
MUTANTS = {
    "mask_after_softmax": {
        "bug": literate.chapter_definition("09_training",
                                           "mask_after_softmax"),
        "expect": "leak",
        "prediction": f"excess below -{E13_CAUGHT} nats for every seed: "
                      "the denominator of every attention row sums over "
                      "the future keys, and with four tokens the model "
                      "learns to read the next token from it"},
    "targets_not_shifted": {
        "bug": literate.chapter_definition("09_training",
                                           "targets_not_shifted"),
        "expect": "misfit",
        "prediction": f"excess above +{E13_CAUGHT} nats for every seed: "
                      "the model learns to copy its input, which the "
                      "held-out targets (shifted by the evaluator itself) "
                      "do not follow; the periodic estimate during "
                      "training, drawn through the same loader, falls far "
                      "below ln V instead"},
}


def run_e13(args) -> dict:
    V = LEAK_MODEL["vocab_size"]
    probe = EXPERIMENTS["E13"]
    out = {"probe": "E13", "model": LEAK_MODEL, "ln_V": math.log(V),
           "caught_at": E13_CAUGHT, "seeds": list(probe.seeds),
           "environment": environment(), "mutants": {}}
    for name in args.mutants:
        m = MUTANTS[name]
        runs = {}
        for seed in probe.seeds:
            t0 = time.perf_counter()
            with m["bug"]():
                final = measure_unpredictable_targets(seed)
            raw = final.pop("raw")
            final["excess_loader"] = raw["val_loss"][-1] - math.log(V)
            final["verdict"] = e13_verdict(final["excess"])
            final["wall_s"] = time.perf_counter() - t0
            final["val_steps"] = raw["val_steps"]
            final["val_loss"] = raw["val_loss"]
            runs[str(seed)] = final
            print(f"E13 {name} seed {seed}: excess {final['excess']:+.4f} "
                  f"({final['verdict']}), periodic estimate "
                  f"{final['excess_loader']:+.4f}, "
                  f"{final['wall_s']:.0f} s", flush=True)
        caught = all(r["verdict"] == m["expect"] for r in runs.values())
        out["mutants"][name] = {"prediction": m["prediction"],
                                "expect": m["expect"], "runs": runs,
                                "caught": caught}
    return out


def _hf_cache_tensors(cache) -> list:
    """Every key and value tensor a Hugging Face cache object holds."""
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [t for layer in cache.layers
                for t in (layer.keys, layer.values) if t is not None]
    return [t for kv in cache.to_legacy_cache() for t in kv]


def run_e12_hf(args) -> dict:
    from oracles import hf_gpt2

    from transformer.cost_model import kv_cache_bytes
    cfg = tiny_model_config()
    hf = hf_gpt2(cfg)
    g = torch.Generator().manual_seed(0)
    rows = []
    for B, T0, N in E12_SHAPES:
        N = min(N, cfg.block_size - T0)
        prompt = torch.randint(0, cfg.vocab_size, (B, T0),
                               generator=g)  # (B, T0)
        with torch.no_grad():
            out = hf.generate(prompt, attention_mask=torch.ones_like(prompt),
                              max_new_tokens=N, min_new_tokens=N,
                              do_sample=False, use_cache=True,
                              return_dict_in_generate=True,
                              pad_token_id=0)
        tensors = _hf_cache_tensors(out.past_key_values)
        storages = {t.untyped_storage().data_ptr():
                    t.untyped_storage().nbytes() for t in tensors}
        held = sum(storages.values())
        filled = tensors[0].shape[2]
        rows.append({"B": B, "prompt": T0, "new": N, "filled": filled,
                     "tensors": len(tensors), "held_bytes": held,
                     "derived_filled": kv_cache_bytes(filled, B, cfg),
                     "derived_block": kv_cache_bytes(cfg.block_size, B,
                                                     cfg)})
        print(f"HF B={B} T0={T0} N={N}: filled {filled}, held {held:,} B, "
              f"derived {rows[-1]['derived_filled']:,} B", flush=True)
    worst = max(abs(r["held_bytes"] - r["derived_filled"])
                / r["derived_filled"] for r in rows)
    exact = all(r["filled"] == r["prompt"] + r["new"] - 1
                and r["tensors"] == 2 * cfg.n_layer for r in rows)
    return {"probe": "E12", "oracle": "transformers GPT2LMHeadModel, "
            "DynamicCache after generate (greedy)",
            "prediction": "the cache's tensors hold exactly "
                          "kv_cache_bytes(T0 + N - 1, B): two per layer, "
                          "T0 + N - 1 positions, nothing preallocated",
            "model_config": cfg.__dict__, "shapes": rows,
            "max_relative_error": worst, "as_derived": exact,
            "environment": environment()}


RUNS = {"e13": ("E13_mutants.json", run_e13),
        "e12-hf": ("E12_hf.json", run_e12_hf)}


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("what", choices=[*RUNS, "all"])
    p.add_argument("--mutants", nargs="+", choices=list(MUTANTS),
                   default=list(MUTANTS), help="E13's bugs to run")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    for what in (RUNS if args.what == "all" else [args.what]):
        name, run = RUNS[what]
        result = run(args)
        write_json(result, OUT / name)
        print(f"wrote {(OUT / name).relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
