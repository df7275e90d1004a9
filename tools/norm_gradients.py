"""Per-layer gradient norms at initialisation, pre-norm vs post-norm.

Chapter "Multi-head attention, the block and the GPT model" (central
question 5) loads the JSON this writes and re-runs one small case live.
Run from the repository root:

    .venv/bin/python tools/norm_gradients.py

Takes about 15 s on one thread. Writes results/norm_gradients/grad_norms.json.
"""
from __future__ import annotations

import math
import os
import platform
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transformer.bench import environment, write_json  # noqa: E402
from transformer.diagnostics import block_grad_norms  # noqa: E402
from transformer.model import GPT, GPTConfig, Linear  # noqa: E402

DEPTHS = [2, 4, 8, 16]
SEEDS = [0, 1, 2]
SETUP = dict(vocab_size=64, block_size=32, n_head=4, n_embd=64,
             batch_size=8, seq_len=32)


def unit_init(model: nn.Module) -> None:
    """Vaswani-style unit-scale init: every Linear N(0, 1/fan_in),
    embeddings N(0, 1), so every residual branch starts at size O(1)."""
    for mod in model.modules():
        if isinstance(mod, Linear):  # weight (in, out)
            std = 1.0 / math.sqrt(mod.weight.shape[0])
            nn.init.normal_(mod.weight, 0.0, std)
        elif isinstance(mod, nn.Linear):  # weight (out, in): the head
            std = 1.0 / math.sqrt(mod.in_features)
            nn.init.normal_(mod.weight, 0.0, std)
        elif isinstance(mod, nn.Embedding):
            nn.init.normal_(mod.weight, 0.0, 1.0)


def layer_grad_norms(depth: int, norm_position: str, init: str,
                     seed: int) -> list[float]:
    """‖∂loss/∂W‖ over the weight matrices of each block, bottom to top."""
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=SETUP["vocab_size"],
                    block_size=SETUP["block_size"], n_layer=depth,
                    n_head=SETUP["n_head"], n_embd=SETUP["n_embd"],
                    norm_position=norm_position)
    model = GPT(cfg)
    if init == "unit":
        unit_init(model)
    g = torch.Generator().manual_seed(1000 + seed)
    shape = (SETUP["batch_size"], SETUP["seq_len"])
    idx = torch.randint(0, cfg.vocab_size, shape, generator=g)  # (B, T)
    targets = torch.randint(0, cfg.vocab_size, shape, generator=g)  # (B, T)
    return block_grad_norms(model, idx, targets, matrices_only=True)


def main() -> None:
    torch.set_num_threads(1)
    t0 = time.time()
    runs = []
    for init in ("gpt2", "unit"):
        for depth in DEPTHS:
            for pos in ("pre", "post"):
                for seed in SEEDS:
                    runs.append(dict(init=init, depth=depth,
                                     norm_position=pos, seed=seed,
                                     grad_norms=layer_grad_norms(
                                         depth, pos, init, seed)))
    out = dict(setup=SETUP, depths=DEPTHS, seeds=SEEDS, runs=runs,
               torch=torch.__version__, python=platform.python_version(),
               loadavg=os.getloadavg(), seconds=round(time.time() - t0, 1),
               environment=environment())
    path = ROOT / "results" / "norm_gradients" / "grad_norms.json"
    write_json(out, path)
    print(f"wrote {path.relative_to(ROOT)} in {out['seconds']} s")


if __name__ == "__main__":
    main()
