"""The tables REPORT.md quotes, rebuilt from results/experiments/*.json.

    python tools/report_tables.py          # print every table, markdown

Each table is exactly the one chapter "Ablations" renders for the same
experiment: transformer.experiments.summary_table over the committed
records, with the metrics its declaration names (every cell a mean over
seeds with its 95% t interval). tests/test_report.py calls the same
functions and fails if a table in REPORT.md differs from what the
committed JSON gives.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[1]
if str(ROOT_DIR) not in sys.path:  # run as a script: this checkout's package
    sys.path.insert(0, str(ROOT_DIR))

from transformer.ablations import EXPERIMENTS  # noqa: E402
from transformer.experiments import load_runs, summary_table  # noqa: E402

ROOT = ROOT_DIR / "results" / "experiments"


def table(exp_id: str, root: Path = ROOT) -> str:
    """The chapter's summary table of experiment `exp_id`."""
    exp = EXPERIMENTS[exp_id]
    return summary_table(exp, load_runs(exp_id, root), exp.metrics)


TABLES = {i: (lambda root=ROOT, i=i: table(i, root)) for i in EXPERIMENTS}


def complete(exp_id: str, root: Path = ROOT) -> bool:
    exp = EXPERIMENTS[exp_id]
    return len(load_runs(exp.id, root)) == len(exp.points())


if __name__ == "__main__":
    for name, make in TABLES.items():
        if complete(name):
            print(f"<!-- table:{name} -->\n{make()}\n")
        else:
            print(f"{name}: incomplete\n", file=sys.stderr)
