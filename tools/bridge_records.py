"""Bridge a long grid across a code commit: rerun one committed record with
today's code and keep the bridge if its curves are bit-identical.

    python tools/bridge_records.py E19 [--record NAME]

The record defaults to the fastest committed record of the grid's newest
commit (the one whose configuration trains quickest). Writes
results/experiments/<ID>/bridges/<from>-<to>.json whichever way it went;
exit 0 when bit-identical, 1 when the curves differ (the grid must then be
restarted, not bridged), 2 on bad input. Chapter "Ablations", section "Grids
that outlive a commit".
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from transformer.ablations import EXPERIMENTS  # noqa: E402
from transformer.bridges import bridge_record  # noqa: E402
from transformer.experiments import (Experiment, _run_name,  # noqa: E402
                                     load_runs)
from transformer.grid_point import CODE_COMMIT  # noqa: E402
from tool_cli import parser  # noqa: E402  (tools/, this script's folder)


def default_record(exp) -> str | None:
    """The fastest record of the grid's newest commit (by record time)
    that this code did not make, or None."""
    recs = [r for r in load_runs(exp.id) if r["git_commit"] != CODE_COMMIT]
    if not recs:
        return None
    newest = max(recs, key=lambda r: r["machine"]["time_utc"])["git_commit"]
    rec = min((r for r in recs if r["git_commit"] == newest),
              key=lambda r: r["wall_s_total"])
    stratum = rec["stratum"]
    stratum = tuple(stratum) if isinstance(stratum, list) else stratum
    return _run_name(exp, stratum, rec["value"], rec["seed"])


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("experiment")
    ap.add_argument("--record", default=None,
                    help="file name of the record to rerun")
    args = ap.parse_args(argv)
    grids = sorted(k for k, e in EXPERIMENTS.items()
                   if isinstance(e, Experiment))
    exp = EXPERIMENTS.get(args.experiment)
    if args.experiment not in grids:
        ap.error(f"argument experiment: expected one of {grids}, got "
                 f"{args.experiment!r}")
    name = args.record or default_record(exp)
    if name is None:
        print(f"bridge_records: {exp.id} has no record from another commit "
              f"than {CODE_COMMIT}: nothing to bridge", file=sys.stderr)
        return 2
    try:
        out = bridge_record(exp, name)
    except ValueError as e:
        print(f"bridge_records: {e}", file=sys.stderr)
        return 2
    return 0 if out["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
