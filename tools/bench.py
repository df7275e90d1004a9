"""Time a Python statement with the book's harness (`transformer.bench`).

A thin command-line entry point in the spirit of `python -m timeit`:

    python tools/bench.py --name matmul_128 --threads 1 --number 10 \\
        --setup "import torch; a = torch.randn(128, 128); b = a.T" \\
        --stmt "a @ b"

times `--stmt` after running `--setup` once, prints p50 with its bootstrap
interval, p95, p99, min and max, and writes the raw samples, the summary and
the environment to results/bench/NAME.json. With `--stmt-b` it times two
statements interleaved and reports the ratio of their medians (A over B).
Derived in the appendix "Measuring honestly" (chapters/90_measuring.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transformer.bench import (benchmark, compare, format_latency,  # noqa
                               write_json)
from tool_cli import (add_out, add_seed, add_threads,  # noqa: E402
                      add_timing, int_at_least, parser)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--name", required=True, help="record name (file stem)")
    p.add_argument("--stmt", required=True, help="statement to time (A)")
    p.add_argument("--stmt-b", help="second statement, timed interleaved")
    p.add_argument("--setup", default="pass", help="run once before timing")
    add_timing(p, warmup=5, repeat=30, what="samples")
    p.add_argument("--number", type=int_at_least(1), default=1, metavar="N",
                   help="calls per timed sample (default: %(default)s)")
    add_threads(p, help="torch threads while timing")
    add_seed(p, help="bootstrap seed")
    p.add_argument("--unit", default="ms", choices=["s", "ms", "us"])
    add_out(p, str(ROOT / "results" / "bench"), help="folder for NAME.json")
    args = p.parse_args(argv)

    scope: dict = {}
    exec(args.setup, scope)
    code_a = compile(args.stmt, "<stmt>", "exec")
    fn_a = lambda: exec(code_a, scope)  # noqa: E731
    common = dict(warmup=args.warmup, repeat=args.repeat,
                  number=args.number, threads=args.threads, seed=args.seed)
    if args.stmt_b is None:
        rec = benchmark(fn_a, name=args.name, **common)
        rec["stmt"], rec["setup"] = args.stmt, args.setup
        print(format_latency(rec["summary"], unit=args.unit))
    else:
        code_b = compile(args.stmt_b, "<stmt-b>", "exec")
        fn_b = lambda: exec(code_b, scope)  # noqa: E731
        rec = compare(fn_a, fn_b, names=(args.stmt, args.stmt_b), **common)
        rec["name"], rec["setup"] = args.name, args.setup
        print("A:", format_latency(rec["summary_a"], unit=args.unit))
        print("B:", format_latency(rec["summary_b"], unit=args.unit))
        lo, hi = rec["ratio_ci"]
        print(f"p50(A) / p50(B) = {rec['ratio']:.3f} [{lo:.3f}, {hi:.3f}]")
    print(f"wrote {write_json(rec, Path(args.out) / f'{args.name}.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
