"""The peak sustained read rate of one core, the bandwidth a decode floor
must use (eq. (eq-decode-floor); appendix "Measuring honestly", section
"Read bandwidth").

transformer.bench.peak_read_bandwidth on a 512 MiB float32 buffer (far beyond
the last-level cache), four readers (sum, dot, gemv, copy), `--trials` each,
interleaved, on one thread. Writes results/kv_cache/read_peak.json with the
environment (load average included) at the start and the end: on a busy
machine the peak is an underestimate, and the record says how busy it was.
Run time about 30 s on a busy 2-core machine; --quick (a few seconds,
written under results/tmp/) for a smoke test.

Usage: .venv/bin/python tools/measure_read_peak.py [--quick] [--out PATH]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from transformer.bench import (environment, peak_read_bandwidth,  # noqa: E402
                               write_json)
from tool_cli import add_out, add_quick, int_at_least, parser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    add_quick(ap, help="a smoke test: a 16 MiB buffer, 3 trials, the record "
                       "written under results/tmp/")
    ap.add_argument("--trials", type=int_at_least(1), default=40,
                    metavar="N", help="timed reads per reader (default: "
                    "%(default)s)")
    add_out(ap, type=Path, help="where the record is written (default: "
                                "results/kv_cache/read_peak.json; under "
                                "results/tmp/ with --quick)")
    args = ap.parse_args(argv)
    nbytes, trials = (2 ** 24, 3) if args.quick else (2 ** 29, args.trials)
    out = args.out or ROOT / ("results/tmp/read_peak.json" if args.quick
                              else "results/kv_cache/read_peak.json")
    t0 = time.perf_counter()
    record = {"environment": environment()}
    record["peak"] = peak_read_bandwidth(nbytes=nbytes, trials=trials)
    record["environment_end"] = environment()
    record["wall_s"] = time.perf_counter() - t0
    write_json(record, out)
    pk = record["peak"]
    print(f"peak {pk['GB_s']:.1f} GB/s ({pk['reader']}); best by reader: "
          + ", ".join(f"{k} {v:.1f}" for k, v in pk["max"].items())
          + f"; load {pk['loadavg'][0]:.1f} -> {pk['loadavg_end'][0]:.1f}"
          f"; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
