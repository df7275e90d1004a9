"""RoPE's base and pairing beyond the trained length: one record per model.

    python tools/rope_base.py [--seeds 0 1 2] [--arms "base 1e4" mixed ...]

Trains the ablations' byte model (transformer.experiments' byte shape and recipe)
at T = 64 with RoPE for each arm and seed, scores it on fixed held-out windows of
4T = 256 bytes, and writes results/rope_base/<arm>-s<seed>.json. A record that
exists is skipped, so an interrupted grid resumes where it stopped. The arm
"base 1e4 + NTK" reuses the base-1e4 model (no training). Declaration:
results/rope_base/DECLARATION.md. Chapter "RoPE's base and conventions".
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402

from transformer import experiments as ex  # noqa: E402
from transformer.baseline import token_stream  # noqa: E402
from transformer.bench import environment  # noqa: E402
from transformer.model import GPTConfig  # noqa: E402
from transformer.rope_scaling import (mixed_layout, ntk_base,  # noqa: E402
                                      set_rope_base)
from transformer.training import (TrainConfig, heldout_losses,  # noqa
                                  init_model, train)

OUT = ROOT / "results" / "rope_base"
ARMS = {"base 1e3": 1e3, "base 1e4": 1e4, "base 1e5": 1e5, "mixed": 1e4,
        "base 1e4 + NTK": 1e4, "base 50": 50.0}
DEFAULT_ARMS = ("base 1e3", "base 1e4", "base 1e5", "mixed",
                "base 1e4 + NTK")
FACTOR = 4  # evaluated length / trained length
COPY_DISTANCES = (16, 32, 48, 96, 160, 224)
SPAN = 16


def record_path(arm: str, seed: int) -> Path:
    return OUT / f"{arm.replace(' ', '_').replace('+', 'plus')}-s{seed}.json"


def copy_probe(model, val_ids, n_windows: int = 32) -> dict:
    """Loss gain on bytes 2..SPAN of a span copied d bytes later, against
    the same positions of the unedited window (nats per byte)."""
    L = FACTOR * ex._BYTE_MODEL["block_size"]
    g = torch.Generator().manual_seed(ex.EVAL_SEED)
    starts = torch.randint(0, len(val_ids) - L, (n_windows,), generator=g)
    base = torch.stack([val_ids[s:s + L] for s in starts])  # (N, L)
    out = {}
    with torch.no_grad():
        for d in COPY_DISTANCES:
            end = L - 1  # the copy ends at the window's last target
            dst = end - SPAN + 1
            src = dst - d
            edited = base.clone()
            edited[:, dst:dst + SPAN] = base[:, src:src + SPAN]

            def nll(x):
                logits = model(x[:, :-1])[0]  # (N, L-1, V)
                lp = torch.log_softmax(logits.double(), -1)
                tgt = x[:, 1:]
                return -lp.gather(-1, tgt[..., None])[..., 0]  # (N, L-1)
            sl = slice(dst, dst + SPAN - 1)  # targets dst+1 .. dst+SPAN-1
            out[str(d)] = (nll(base)[:, sl].mean()
                           - nll(edited)[:, sl].mean()).item()
    return out


def run_one(arm: str, seed: int, ids) -> dict:
    _, train_ids, val_ids = ids
    mcfg = GPTConfig(vocab_size=ex.BYTE_VOCAB_SIZE, pos_encoding="rope",
                     rope_base=ARMS[arm], **ex._BYTE_MODEL)
    tcfg = TrainConfig(**{**ex.RECIPE, **ex._BYTE_RUN, "seed": seed})
    start = time.process_time()
    if arm == "base 1e4 + NTK":  # the trained base-1e4 model, rescaled
        model = init_model(mcfg, seed)
        base_rec = json.loads(record_path("base 1e4", seed).read_text())
        state = torch.load(OUT / "models" / f"base_1e4-s{seed}.pt")
        model.load_state_dict(state)
        set_rope_base(model, ntk_base(1e4, FACTOR, mcfg.head_dim))
        hist = {"train_loss": base_rec["train_loss"]}
    else:
        model = init_model(mcfg, seed)  # the same weights for every arm
        if arm == "mixed":
            mixed_layout(model)
        hist = train(model, train_ids, val_ids, tcfg)
        if arm == "base 1e4":
            (OUT / "models").mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(),
                       OUT / "models" / f"base_1e4-s{seed}.pt")
    T4 = FACTOR * mcfg.block_size
    nll = heldout_losses(model, val_ids, T4, tcfg.batch_size,
                         tcfg.eval_batches, ex.EVAL_SEED)  # (n, 4T)
    return {
        "arm": arm, "seed": seed, "model_config": {k: getattr(mcfg, k)
                                          for k in mcfg.__dataclass_fields__},
        "train_config": {k: getattr(tcfg, k)
                         for k in tcfg.__dataclass_fields__},
        "rope_base_eval": model.blocks[0].attn.rope_base,
        "rope_layout_k": model.blocks[0].attn.rope_layout_k,
        "train_loss": [round(x, 5) for x in hist["train_loss"]],
        "loss_per_position": [round(x, 5) for x in nll.mean(0).tolist()],
        "copy_gain": copy_probe(model, val_ids),
        "cpu_s": round(time.process_time() - start, 1),
        "environment": {**environment(), "load_avg": os.getloadavg()},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS))
    args = ap.parse_args(argv)
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        print(f"--arms: unknown {unknown}; expected some of {list(ARMS)}",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    ids = token_stream(ex.BYTE_VOCAB_SIZE)
    OUT.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for arm in args.arms:
            path = record_path(arm, seed)
            if path.exists():
                continue
            rec = run_one(arm, seed, ids)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(rec) + "\n")
            tmp.replace(path)
            print(f"{arm} seed {seed}: {rec['cpu_s']} CPU s, loss 0-63 "
                  f"{sum(rec['loss_per_position'][:64]) / 64:.3f}, "
                  f"128-255 {sum(rec['loss_per_position'][128:]) / 128:.3f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
