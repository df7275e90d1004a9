"""The tables REPORT.md quotes, rebuilt from results/experiments/*.json.

    python tools/report_tables.py          # print every table, markdown

tests/test_report.py calls the same functions and fails if a table in
REPORT.md differs from what the committed JSON gives. Every cell is a mean
over seeds with its 95% t interval (transformer.stats.summarize), or a
paired difference over shared seeds (transformer.stats.paired_difference).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[1]
if str(ROOT_DIR) not in sys.path:  # run as a script: this checkout's package
    sys.path.insert(0, str(ROOT_DIR))

from transformer.experiments import EXPERIMENTS, TABLE_METRICS, load_runs
from transformer.stats import paired_difference, summarize

ROOT = ROOT_DIR / "results" / "experiments"


def fmt(s, digits: int = 3) -> str:
    return "n/a" if s is None else (f"{s.mean:.{digits}f} "
                                    f"[{s.lo:.{digits}f}, {s.hi:.{digits}f}]")


def _points(exp_id: str, root: Path = ROOT) -> dict:
    out: dict = {}
    for r in load_runs(exp_id, root):
        out.setdefault((r["stratum"], r["value"]), {})[r["seed"]] = r
    return out


def _final(pts, key, seeds, metric):
    return [pts[key][s]["final"][metric] for s in seeds]


def e4_table(root: Path = ROOT) -> str:
    exp = EXPERIMENTS["E4"]
    pts, seeds = _points("E4", root), exp.seeds
    lines = ["| encoding | loss at T = 64 | none minus this (paired) | "
             "loss at 2T, positions 64-127 | positions 64-127 minus 0-63 |",
             "|---|---|---|---|---|"]
    none = _final(pts, (None, "none"), seeds, "val_loss")
    for v in exp.values:
        val = _final(pts, (None, v), seeds, "val_loss")
        gap = "" if v == "none" else fmt(paired_difference(none, val))
        if v == "learned":
            tail = rise = "n/a (no position 64)"
        else:
            t = _final(pts, (None, v), seeds, "val_loss_2x_tail")
            h = _final(pts, (None, v), seeds, "val_loss_2x_head")
            tail = fmt(summarize(t))
            rise = fmt(summarize([a - b for a, b in zip(t, h)]))
        lines.append(f"| {v} | {fmt(summarize(val))} | {gap} | {tail} | "
                     f"{rise} |")
    return "\n".join(lines)


def e6_table(root: Path = ROOT) -> str:
    exp = EXPERIMENTS["E6"]
    pts, seeds = _points("E6", root), exp.seeds
    lines = ["| depth | pre-norm loss | post-norm loss | post minus pre "
             "(paired) | diverged (pre/post) | max grad norm, pre | "
             "max grad norm, post |",
             "|---|---|---|---|---|---|---|"]
    for L in exp.strata:
        pre = _final(pts, (L, "pre"), seeds, "val_loss")
        post = _final(pts, (L, "post"), seeds, "val_loss")
        ok = [i for i in range(len(seeds))
              if math.isfinite(pre[i]) and math.isfinite(post[i])]
        d = paired_difference([post[i] for i in ok], [pre[i] for i in ok])
        div = [sum(_final(pts, (L, p), seeds, "diverged"))
               for p in ("pre", "post")]
        fin = [summarize([x for x in xs if math.isfinite(x)])
               for xs in (pre, post)]
        mg = [summarize(_final(pts, (L, p), seeds, "max_grad_norm"))
              for p in ("pre", "post")]
        lines.append(f"| {L} | {fmt(fin[0])} | {fmt(fin[1])} | {fmt(d)} | "
                     f"{div[0]}/{div[1]} | {fmt(mg[0], 2)} | "
                     f"{fmt(mg[1], 2)} |")
    return "\n".join(lines)


def e6_init_table(root: Path = ROOT) -> str:
    exp = EXPERIMENTS["E6"]
    pts, seeds = _points("E6", root), exp.seeds
    lines = ["| depth | pre: first block | pre: last block | post: first "
             "block | post: last block | pre / post, last block |",
             "|---|---|---|---|---|---|"]
    for L in exp.strata:
        row = {}
        for p in ("pre", "post"):
            g = [pts[L, p][s]["init_grad_norms"] for s in seeds]
            row[p] = (summarize([x[0] for x in g]),
                      summarize([x[-1] for x in g]))
        ratio = summarize([pts[L, "pre"][s]["init_grad_norms"][-1]
                           / pts[L, "post"][s]["init_grad_norms"][-1]
                           for s in seeds])
        lines.append(f"| {L} | {fmt(row['pre'][0], 4)} | "
                     f"{fmt(row['pre'][1], 4)} | {fmt(row['post'][0], 4)} | "
                     f"{fmt(row['post'][1], 4)} | {fmt(ratio, 1)} |")
    return "\n".join(lines)


def brief_table(exp_id: str, root: Path = ROOT) -> str:
    exp = EXPERIMENTS[exp_id]
    pts = _points(exp_id, root)
    metrics = TABLE_METRICS[exp_id]
    head = ([exp.stratum] if exp.stratum else []) + [exp.variable, *metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for z in exp.strata:
        for v in exp.values:
            cells = ([str(z)] if exp.stratum else []) + [str(v)]
            for m in metrics:
                xs = [pts[z, v][s]["final"].get(m, pts[z, v][s].get(m))
                      for s in exp.seeds]
                digits = 0 if m in ("n_params", "tokens_per_s") else 3
                cells.append(fmt(summarize(xs), digits))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


TABLES = {"E4": e4_table, "E6": e6_table, "E6-init": e6_init_table,
          **{i: (lambda root=ROOT, i=i: brief_table(i, root))
             for i in ("E2", "E3", "E5", "E7", "E8", "E14", "E1", "E9",
                       "E10", "E11", "E12", "E13")}}


def complete(exp_id: str, root: Path = ROOT) -> bool:
    exp = EXPERIMENTS[exp_id.split("-")[0]]
    return len(load_runs(exp.id, root)) == len(exp.points())


if __name__ == "__main__":
    for name, make in TABLES.items():
        if complete(name):
            print(f"<!-- table:{name} -->\n{make()}\n")
        else:
            print(f"{name}: incomplete\n", file=sys.stderr)
