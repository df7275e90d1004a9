"""E15b's runs: the recipe sweep, the adequacy gate and the size ladder.

Declared in results/experiments/E15b/DECLARATION.md (committed before any
run). One JSON record per model under results/experiments/E15b/PHASE/; a
record that exists is skipped, so the script resumes where it stopped. Each
model trains on one thread at the lowest priority (the host is shared):

    nice -n 19 .venv/bin/python tools/run_lookup.py sweep [--shard K/N]
    nice -n 19 .venv/bin/python tools/run_lookup.py gate  [--shard K/N]
    nice -n 19 .venv/bin/python tools/run_lookup.py ladder [--shard K/N]
    nice -n 19 .venv/bin/python tools/run_lookup.py ladders   (amendments 1-3:
        per T the MLP rungs, then the two-head attention rungs, except at
        the largest T, where the two-head rungs come first, then the
        extended two-head run, the one-head rungs left and the MLP rungs
        there last; each rung list cut after its first pass)
    nice -n 19 .venv/bin/python tools/run_lookup.py amend4    (amendment 4:
        the two narrower MLP rungs at T = 256 trained again at the answer
        positions only, as the wider ones there are)
    .venv/bin/python tools/run_lookup.py list PHASE     (jobs, done or not)
    .venv/bin/python tools/run_lookup.py select         (the sweep's choice)
    .venv/bin/python tools/run_lookup.py paths          (every record the
        declaration asks for so far, under results/, done or not)
    .venv/bin/python tools/bridge_e15b.py               (records of older
        code: the code then and now, on one machine, must train the first
        BRIDGE_STEPS steps bit for bit alike; a tool of its own, so that
        the bookkeeping it imports is not code the records depend on)

`python -m transformer experiment e15b` runs sweep, gate and ladders in
turn (an item of transformer.reproduce.REPRODUCE, which reads `paths`).

Section "E15b" of chapter "Ablations" reads the records.
"""
from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tool_cli import parser, shard  # noqa: E402  (tools/)
from transformer.data import atomic_write  # noqa: E402
from transformer.training import TrainingInterrupted  # noqa: E402
from transformer.lookup import (LOOKUP_TASK, evaluate_lookup,  # noqa: E402
                                lookup_diagnostics, lookup_gpt, lookup_mlp,
                                train_lookup)

OUT = ROOT / "results" / "experiments" / "E15b"
CKPT = ROOT / "results" / "tmp" / "e15b"  # git-ignored: checkpoints, curves
PHASES = ("sweep", "gate", "ladder", "ladder_h2", "extend", "ladders",
          "amend4")
BRIDGES = OUT / "bridges"
BRIDGE_STEPS = 200
SWEEP_SEED, GATE_SEEDS = 100, (0, 1, 2)
RECIPE = {"batch_size": 64, "steps": 4000, "warmup_steps": 100,
          "weight_decay": 0.1}
EXTENDED_STEPS = 12000
CURVE_EVERY, CURVE_SEQ = 250, 256
ATTN = {"n_embd": 32, "n_head": 2}  # the sweep's and the gate's size
MLP_EMBD = 16
LADDER_T = (32, 64, 128, 256)
LADDER_ATTN_D = (8, 16, 32, 64)
LADDER_MLP_HIDDEN = (32, 64, 128, 256, 512)
# Amendment 4: the MLP rungs at the largest T from this width up train the
# MLP at the answer positions only (LookupMLP.logits_at, the same function);
# phase amend4 reruns the two narrower rungs there that way, for comparison.
ANSWERS_ONLY_FROM = 128


def _job(phase, arm, seed, lr, init="gpt2", steps=None, task=None,
         answers_only=False, **size):
    task = dict(task or LOOKUP_TASK)
    steps = steps or RECIPE["steps"]
    parts = [arm, f"T={task['seq_len']}"] + [f"{k}={v}" for k, v in
                                              sorted(size.items())]
    parts += [f"init={init}"] if arm == "attn" else []
    parts += [f"lr={lr:g}", f"steps={steps}", f"seed={seed}"]
    job = {"name": "_".join(parts), "phase": phase, "arm": arm,
           "seed": seed, "lr": lr, "init": init, "steps": steps,
           "task": task, "size": size}
    return {**job, "answers_only": True} if answers_only else job


def sweep_jobs():
    jobs = [_job("sweep", "attn", SWEEP_SEED, lr, init, **ATTN)
            for lr in (3e-3, 1e-3, 1e-2) for init in ("gpt2", "torch")]
    jobs += [_job("sweep", "mlp", SWEEP_SEED, lr, window=LOOKUP_TASK["window"],
                  n_embd=MLP_EMBD, match="attn") for lr in (3e-3, 1e-3, 1e-2)]
    return jobs


def _records(phase):
    d = OUT / phase
    return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))]


def select():
    """The declared selection rule over the sweep's records: the attention
    cell with the highest min(acc_in, acc_out), ties within 0.005 to the
    lower lr; the MLP lr with the highest acc_in. None while incomplete."""
    names = {j["name"] for j in sweep_jobs()}
    recs = {r["name"]: r for r in _records("sweep")}
    if not names <= set(recs):
        return None
    attn = [r for n, r in recs.items() if n in names and r["arm"] == "attn"]
    score = {r["name"]: min(r["final"]["acc_in"], r["final"]["acc_out"])
             for r in attn}
    top = max(score.values())
    best = min((r for r in attn if score[r["name"]] >= top - 0.005),
               key=lambda r: (r["lr"], -score[r["name"]]))
    out = {"attn": {"lr": best["lr"], "init": best["init"],
                    "steps": best["steps"], "score": score[best["name"]]}}
    if top < 0.95:  # the declared extension stage
        ext = _job("sweep", "attn", SWEEP_SEED, best["lr"], best["init"],
                   EXTENDED_STEPS, **ATTN)
        if ext["name"] not in recs:
            out["extend"] = ext
            return out
        f = recs[ext["name"]]["final"]
        out["attn"].update(steps=EXTENDED_STEPS,
                           score=min(f["acc_in"], f["acc_out"]))
    mlp = [r for n, r in recs.items() if n in names and r["arm"] == "mlp"]
    bm = max(mlp, key=lambda r: (r["final"]["acc_in"], -r["lr"]))
    out["mlp"] = {"lr": bm["lr"], "acc_in": bm["final"]["acc_in"]}
    return out


def gate_jobs():
    s = select()
    if s is None or "mlp" not in s:
        return []
    a, lr_m, W = s["attn"], s["mlp"]["lr"], LOOKUP_TASK["window"]
    jobs = []
    for seed in GATE_SEEDS:
        jobs.append(_job("gate", "attn", seed, a["lr"], a["init"], a["steps"],
                         **ATTN))
        for window in (W, LOOKUP_TASK["seq_len"]):
            jobs.append(_job("gate", "mlp", seed, lr_m, steps=a["steps"],
                             window=window, n_embd=MLP_EMBD, match="attn"))
    return jobs


def passes(rec, bar=0.95):
    """The ladder's pass rule: accuracy >= bar on all queries and, for
    attention, on the queries at distance > T/2 as well (where any)."""
    f = rec["final"]
    if rec["arm"] == "mlp":
        return f["acc"] >= bar
    far = f.get("acc_far")
    return min(f["acc"], 1.0 if far is None else far) >= bar


def _rungs(phase, sizes, make):
    """One (phase, family, T) rung list, smallest first, cut after the
    first rung whose record passes (amendment 1: every smaller rung ran
    and missed, so the cut one is exactly 'the smallest that passes')."""
    done = {r["name"]: r for r in _records(phase)}
    jobs = []
    for size in sizes:
        job = make(size)
        jobs.append(job)
        if job["name"] in done and passes(done[job["name"]]):
            break
    return jobs


def _ladder(phase, T):
    s = select()
    if s is None or "mlp" not in s:
        return []
    a, lr_m = s["attn"], s["mlp"]["lr"]
    task = {**LOOKUP_TASK, "seq_len": T}
    if phase == "ladder_h2":
        return _rungs(phase, LADDER_ATTN_D, lambda D: _job(
            phase, "attn", 0, a["lr"], a["init"], a["steps"], task,
            n_embd=D, n_head=2))
    mlp = _rungs(phase, LADDER_MLP_HIDDEN, lambda h: _job(
        phase, "mlp", 0, lr_m, steps=a["steps"], task=task, window=T,
        n_embd=MLP_EMBD, hidden=h,
        answers_only=T == LADDER_T[-1] and h >= ANSWERS_ONLY_FROM))
    attn = _rungs(phase, LADDER_ATTN_D, lambda D: _job(
        phase, "attn", 0, a["lr"], a["init"], a["steps"], task, n_embd=D,
        n_head=1))
    return mlp + attn


def ladder_jobs():
    """The declared ladder (one head), its rungs smallest first and cut
    after the first pass (amendment 1)."""
    return [j for T in LADDER_T for j in _ladder("ladder", T)]


def ladder_h2_jobs():
    """Amendment 1's ladder: attention with two heads, the gated shape."""
    return [j for T in LADDER_T for j in _ladder("ladder_h2", T)]


def extend_jobs():
    """Amendment 3's diagnostic: the gated shape (two heads, D = 32) at the
    largest T trained for EXTENDED_STEPS, three times the ladder's steps:
    a plateau that lifts later, or a model that does not learn the lookup
    at that length. Beside the ladder; its pass rule and answer unchanged."""
    s = select()
    if s is None or "mlp" not in s:
        return []
    a = s["attn"]
    task = {**LOOKUP_TASK, "seq_len": LADDER_T[-1]}
    return [_job("extend", "attn", 0, a["lr"], a["init"], EXTENDED_STEPS,
                 task, **ATTN)]


def ladders_jobs():
    """The order of the compute: amendment 1 (per T, the MLP rungs, then
    the two-head attention rungs; then the one-head rungs left) as changed
    by amendment 2 (the two-head rungs at the largest T, 256, before the
    MLP rungs there, which cost hours where attention's cost minutes) and
    amendment 3 (then the extended two-head run, the one-head rungs left,
    and the MLP rungs at T = 256 last: about 14 core-hours)."""
    mlp = {T: [j for j in _ladder("ladder", T) if j["arm"] == "mlp"]
           for T in LADDER_T}
    h2 = {T: _ladder("ladder_h2", T) for T in LADDER_T}
    *shorter, longest = LADDER_T
    jobs = [j for T in shorter for j in mlp[T] + h2[T]]
    jobs += h2[longest] + extend_jobs()
    jobs += [j for j in ladder_jobs() if j["arm"] == "attn"]
    return jobs + mlp[longest]


def amend4_jobs():
    """Amendment 4's comparison: the MLP rungs at the largest T below
    ANSWERS_ONLY_FROM, which ran with the whole sequence computed, trained
    again at the answer positions only (same seed, recipe and name; records
    under amend4/). Beside the ladder; no rung's answer comes from them."""
    s = select()
    if s is None or "mlp" not in s:
        return []
    T, lr_m = LADDER_T[-1], s["mlp"]["lr"]
    task = {**LOOKUP_TASK, "seq_len": T}
    return [_job("amend4", "mlp", 0, lr_m, steps=s["attn"]["steps"],
                 task=task, answers_only=True, window=T, n_embd=MLP_EMBD,
                 hidden=h)
            for h in LADDER_MLP_HIDDEN if h < ANSWERS_ONLY_FROM]


JOBS = {"sweep": sweep_jobs, "gate": gate_jobs, "ladder": ladder_jobs,
        "ladder_h2": ladder_h2_jobs, "extend": extend_jobs,
        "ladders": ladders_jobs, "amend4": amend4_jobs}


def build(job):
    size, task = dict(job["size"]), job["task"]
    if job["arm"] == "attn":
        return lookup_gpt(task, size["n_embd"], size["n_head"], job["init"],
                          job["seed"])
    if size.get("match") == "attn":
        ref = lookup_gpt(task, ATTN["n_embd"], ATTN["n_head"], "gpt2", 0)
        size["match"] = ref.n_params()
    return lookup_mlp(task, size["window"], size["n_embd"],
                      size.get("hidden"), size.get("match"), job["seed"])


def _commit():
    """The last commit of the code that makes a record (the module and this
    script), so records made while the chapter is edited share one."""
    try:
        return subprocess.run(["git", "log", "-1", "--format=%H", "--",
                               "transformer/lookup.py", "tools/run_lookup.py"],
                              cwd=ROOT,
                              capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _scratch(job, suffix: str) -> Path:
    """A job's checkpoint or curve file under CKPT (the curve survives a
    kill); amend4's jobs rerun ladder jobs under their names, so their
    files are prefixed."""
    stem = job["name"] if job["phase"] != "amend4" else f"amend4-{job['name']}"
    return CKPT / f"{stem}{suffix}"


def run(job):
    torch.set_num_threads(1)
    commit = _commit()
    model = build(job)
    n_params = sum(p.numel() for p in model.parameters())
    CKPT.mkdir(parents=True, exist_ok=True)
    ckpt, side = _scratch(job, ".pt"), _scratch(job, ".curve.json")
    curve = json.loads(side.read_text()) if side.exists() else []

    def callback(step, history):
        if step % CURVE_EVERY == 0 or step == job["steps"]:
            ev = evaluate_lookup(model, job["task"], CURVE_SEQ, seed=1)
            curve[:] = [c for c in curve if c["step"] < step]
            curve.append({"step": step, "acc": ev["acc"],
                          "acc_in": ev["acc_in"], "acc_out": ev["acc_out"],
                          "copy_chance": ev["copy_chance"]})
            side.write_text(json.dumps(curve))
    t0 = time.perf_counter()
    hist = train_lookup(model, job["task"], job["steps"],
                        RECIPE["batch_size"], job["lr"], job["seed"],
                        RECIPE["warmup_steps"], RECIPE["weight_decay"],
                        callback=callback,
                        checkpoint_path=ckpt if job["arm"] == "attn" else None,
                        checkpoint_interval=CURVE_EVERY,
                        answers_only=job.get("answers_only", False))
    n_eval = 2048 if job["phase"] != "sweep" else 1024
    final = evaluate_lookup(model, job["task"], n_eval)
    rec = {"experiment": "E15b", **job, "n_params": n_params,
           "recipe": RECIPE, "final": final, "curve": curve,
           "train_loss": hist["train_loss"][::50],
           "cpu_s": hist["cpu_s"], "wall_s": time.perf_counter() - t0,
           "resumed_from": hist.get("resumed_from"),
           "diverged": hist.get("diverged", False),
           "git_commit": commit, "torch": torch.__version__,
           "machine": platform.machine(), "threads": 1}
    if job["arm"] == "attn":
        rec["diagnostics"] = lookup_diagnostics(model, job["task"])
    return rec


def all_jobs():
    """Every job the declaration asks for so far: the sweep (with its
    extension stage when the rule calls for it), the gate, and the ladders
    in amendment 3's order."""
    jobs = sweep_jobs()
    ext = (select() or {}).get("extend")
    return (jobs + ([ext] if ext else []) + gate_jobs() + amend4_jobs()
            + ladders_jobs())


def record_path(job) -> Path:
    return OUT / job["phase"] / f"{job['name']}.json"


# Run in a checkout (the current one or a worktree of an older commit) with
# that checkout's own package and run_lookup: the first train losses of a
# record's job, one per step, as JSON on stdout. The same text runs on both
# sides of a bridge, so only the code under it differs.
PREFIX = r"""
import json, os, sys
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tools")]
import torch
import transformer
import run_lookup as rl
assert transformer.__file__.startswith(os.getcwd()), transformer.__file__
rec, K = json.load(open(sys.argv[1])), int(sys.argv[2])
job = {k: rec[k] for k in ("name", "phase", "arm", "seed", "lr", "init",
                           "steps", "task", "size")}
torch.set_num_threads(1)
model = rl.build(job)
got = []
class Enough(Exception):
    pass
def callback(step, history):
    if step >= K:
        got.extend(history["train_loss"])
        raise Enough
fast = {"answers_only": True} if rec.get("answers_only") else {}
try:
    rl.train_lookup(model, job["task"], job["steps"], rl.RECIPE["batch_size"],
                    job["lr"], job["seed"], rl.RECIPE["warmup_steps"],
                    rl.RECIPE["weight_decay"], callback=callback, **fast)
except Enough:
    pass
print(json.dumps(got))
"""


def prefix_losses(record: Path, checkout: Path, steps: int) -> list:
    """PREFIX run in `checkout` on the record at `record`."""
    out = subprocess.run([sys.executable, "-c", PREFIX, str(record),
                          str(steps)], cwd=checkout, capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{record.name} at {checkout}: "
                           f"{out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("phase", choices=PHASES + ("list", "select", "paths"),
                   help="the phase to run; `list PHASE` prints its jobs, done "
                        "or not; `select` the sweep's choice")
    p.add_argument("listed", nargs="?", choices=PHASES, metavar="PHASE",
                   help="with list: the phase whose jobs to print")
    p.add_argument("--shard", type=shard, default=(1, 1), metavar="K/N",
                   help="run only the K-th of every N jobs (1 <= K <= N), "
                        "as `python -m transformer experiment` shards")
    args = p.parse_args(argv)
    if args.phase == "select":
        print(json.dumps(select(), indent=1))
        return 0
    if args.phase == "paths":
        for j in all_jobs():
            print(record_path(j).relative_to(ROOT / "results"))
        return 0
    if args.phase == "list":
        if args.listed is None:
            p.error("list: expected a phase of " + ", ".join(PHASES))
        for j in JOBS[args.listed]():
            done = (OUT / j["phase"] / f"{j['name']}.json").exists()
            print("done" if done else "todo", j["name"])
        return 0
    k, n = args.shard[0] - 1, args.shard[1]  # 0-based below
    phase = args.phase
    while True:  # the sweep may add its extension stage after a pass
        jobs = [j for i, j in enumerate(JOBS[phase]()) if i % n == k]
        todo = [j for j in jobs
                if not (OUT / j["phase"] / f"{j['name']}.json").exists()]
        if not todo:
            if phase == "sweep" and k == 0 and (select() or {}).get("extend"):
                todo = [select()["extend"]]
            else:
                print(f"{phase} shard {k + 1}/{n}: nothing left to run")
                return 0
        job = todo[0]
        print(f"{time.strftime('%H:%M:%S')} {job['name']}", flush=True)
        try:
            rec = run(job)
        except TrainingInterrupted as stop:  # Ctrl-C or SIGTERM
            ckpt = _scratch(job, ".pt")
            saved = (f"{ckpt} holds step {stop.saved_step} (run the same "
                     "command to resume)" if stop.saved_step is not None
                     else f"{ckpt} is as it was (run the same command to "
                     "resume from it)" if ckpt.is_file() else
                     "no checkpoint was written (the window MLP's runs are "
                     "never checkpointed, an attention run only every "
                     f"{CURVE_EVERY} steps): its {stop.step} steps are lost "
                     "and the same command starts it again")
            print(f"{job['name']}: interrupted by "
                  f"{signal.Signals(stop.signum).name} at step {stop.step}; "
                  f"{saved}; finished rungs are kept", file=sys.stderr)
            return 128 + stop.signum
        path = OUT / job["phase"] / f"{job['name']}.json"
        atomic_write(path, json.dumps(rec, indent=1) + "\n")
        for done in (_scratch(job, ".pt"), _scratch(job, ".curve.json")):
            done.unlink(missing_ok=True)
        f = rec["final"]
        print(f"  acc {f['acc']:.3f} in {f['acc_in']:.3f} out "
              f"{f['acc_out']:.3f} cpu {rec['cpu_s']:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
