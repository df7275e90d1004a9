"""E15b's amendment 5: the two-head attention ladder again at seeds 1 and 2.

Declared in results/experiments/E15b/DECLARATION.md (amendment 5, committed
before its runs). The ladder of tools/run_lookup.py's phase ladder_h2 (the
book's GPT, two layers, two heads, widths 8 to 64, the selected recipe,
rungs smallest first and cut after the first pass) at T = 32, 64 and 128,
seeds 1 and 2; one JSON record per model under
results/experiments/E15b_seeds/, skipped when it exists, so the script
resumes (an attention run is checkpointed, so a killed rung resumes too):

    nice -n 19 .venv/bin/python tools/run_lookup_seeds.py run [--seed S]
    .venv/bin/python tools/run_lookup_seeds.py paths   (every record asked
        for so far, under results/, done or not)

A tool of its own, so that the records E15b already holds, and the bridges
that join them to the code now, do not depend on it.
`python -m transformer experiment e15b-seeds` runs it. Section "E15b" of
chapter "Ablations" reads the records.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import run_lookup as rl  # noqa: E402  (tools/)
from tool_cli import parser  # noqa: E402  (tools/)
from transformer.bench import git_commit  # noqa: E402
from transformer.data import atomic_write  # noqa: E402
from transformer.training import TrainingInterrupted  # noqa: E402

OUT = ROOT / "results" / "experiments" / "E15b_seeds"
SEEDS = (1, 2)
SEED_T = (32, 64, 128)


def record_path(job) -> Path:
    return OUT / f"{job['name']}.json"


def jobs(seeds=SEEDS) -> list[dict]:
    """Per T, then per seed, the two-head rungs smallest first, each list
    cut after the first rung whose record passes (amendment 1's rule)."""
    s = rl.select()
    if s is None or "mlp" not in s:
        return []
    a, out = s["attn"], []
    for T in SEED_T:
        task = {**rl.LOOKUP_TASK, "seq_len": T}
        for seed in seeds:
            for D in rl.LADDER_ATTN_D:
                job = rl._job("seeds", "attn", seed, a["lr"], a["init"],
                              a["steps"], task, n_embd=D, n_head=2)
                out.append(job)
                path = record_path(job)
                if path.exists() and rl.passes(json.loads(path.read_text())):
                    break
    return out


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("what", choices=("run", "paths"),
                   help="run the records missing, or list every record asked "
                        "for so far")
    p.add_argument("--seed", type=int, choices=SEEDS,
                   help="run only this seed's rungs (two processes, one "
                        "seed each, never share a rung)")
    args = p.parse_args(argv)
    if args.what == "paths":
        for j in jobs():
            print(record_path(j).relative_to(ROOT / "results"))
        return 0
    seeds = SEEDS if args.seed is None else (args.seed,)
    while True:
        todo = [j for j in jobs(seeds) if not record_path(j).exists()]
        if not todo:
            print("seeds " + ", ".join(map(str, seeds)) + ": nothing left "
                  "to run")
            return 0
        job = todo[0]
        print(f"{time.strftime('%H:%M:%S')} {job['name']}", flush=True)
        try:
            rec = rl.run(job)
        except TrainingInterrupted as stop:  # Ctrl-C or SIGTERM
            ckpt = rl._scratch(job, ".pt")
            saved = (f"{ckpt} holds step {stop.saved_step}"
                     if stop.saved_step is not None else
                     f"{ckpt} is as it was" if ckpt.is_file() else
                     "no checkpoint was written yet (one every "
                     f"{rl.CURVE_EVERY} steps)")
            print(f"{job['name']}: interrupted by "
                  f"{signal.Signals(stop.signum).name} at step {stop.step}; "
                  f"{saved}; the same command resumes; finished rungs are "
                  "kept", file=sys.stderr)
            return 128 + stop.signum
        rec["git_commit"] = git_commit()  # this tool's code, not run_lookup's
        rec["tools_commit"] = git_commit(folder="tools")
        OUT.mkdir(parents=True, exist_ok=True)
        atomic_write(record_path(job), json.dumps(rec, indent=1) + "\n")
        for done in (rl._scratch(job, ".pt"), rl._scratch(job, ".curve.json")):
            done.unlink(missing_ok=True)
        f = rec["final"]
        far = "n/a" if f["acc_far"] is None else f"{f['acc_far']:.3f}"
        print(f"  acc {f['acc']:.3f} far {far} cpu {rec['cpu_s']:.0f} s",
              flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
