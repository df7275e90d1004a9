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

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from transformer.bench import (environment, peak_read_bandwidth,  # noqa: E402
                               write_json)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.trials < 1:
        print("--trials: expected an int >= 1", file=sys.stderr)
        return 2
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
