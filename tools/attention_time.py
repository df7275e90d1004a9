"""Attention's share of forward *time* against context length (chapter
"The cost model", central question 3).

For each width and context length T it builds one pre-norm block with random
weights (`transformer.cost_model.attention_timing_parts`), times its
quadratic part (scores, mask, softmax, weighted sum) and its linear part
(norms, projections, feed-forward) interleaved with `transformer.bench`
on one thread, and records the ratio of medians with its bootstrap interval,
the implied time share, the FLOP share the cost model predicts, and the whole
block's latency. Writes results/cost_model/attention_time.json.

    python tools/attention_time.py            # about a minute on 2 cores
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transformer.bench import (benchmark, compare,  # noqa: E402
                               environment, write_json)
from transformer.cost_model import (attention_flop_share,  # noqa: E402
                                    attention_timing_parts)
from tool_cli import add_out, int_list, parser  # noqa: E402  (tools/)

WIDTHS = [(128, 4), (384, 6)]  # (n_embd, n_head): the book's two widths
CONTEXTS = [64, 128, 256, 512, 1024, 2048]


def measure(n_embd: int, n_head: int, T: int, repeat: int) -> dict:
    parts = attention_timing_parts(T, n_embd, n_head, seed=0)
    rec = compare(parts["quadratic"], parts["linear"],
                  names=("quadratic", "linear"), warmup=3, repeat=repeat,
                  threads=1)
    block = benchmark(parts["block"], name="block", warmup=2,
                      repeat=repeat, threads=1)
    r, (lo, hi) = rec["ratio"], rec["ratio_ci"]
    share = lambda x: x / (1 + x)  # noqa: E731, quadratic / (sum)
    return {
        "n_embd": n_embd, "n_head": n_head, "T": T, "repeat": repeat,
        "ratio": r, "ratio_ci": [lo, hi],
        "time_share": share(r), "time_share_ci": [share(lo), share(hi)],
        "flop_share": attention_flop_share(
            T, vocab_size=1, block_size=T, n_layer=1, n_head=n_head,
            n_embd=n_embd),
        "quadratic": rec["summary_a"], "linear": rec["summary_b"],
        "block": block["summary"],
        "samples_quadratic": rec["samples_a"],
        "samples_linear": rec["samples_b"],
        "samples_block": block["samples"],
        "loadavg": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    add_out(p, str(ROOT / "results" / "cost_model" / "attention_time.json"))
    p.add_argument("--contexts", type=int_list(1),
                   default=",".join(map(str, CONTEXTS)), metavar="T,T,...",
                   help="context lengths (default: %(default)s)")
    args = p.parse_args(argv)
    contexts = args.contexts
    runs = []
    for n_embd, n_head in WIDTHS:
        for T in contexts:
            repeat = 30 if T <= 512 else 15
            run = measure(n_embd, n_head, T, repeat)
            runs.append(run)
            lo, hi = run["time_share_ci"]
            print(f"D={n_embd:4d} T={T:5d}  time share "
                  f"{100 * run['time_share']:5.1f}% [{100 * lo:.1f}, "
                  f"{100 * hi:.1f}]  FLOP share "
                  f"{100 * run['flop_share']:5.1f}%  block p50 "
                  f"{run['block']['p50'] * 1e3:.2f} ms", flush=True)
    record = {"environment": environment(), "widths": WIDTHS,
              "contexts": contexts, "runs": runs}
    print(f"wrote {write_json(record, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
