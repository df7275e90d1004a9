"""E15b's bridges: each older commit that made records, joined to the code
now. For every commit whose code the item `e15b` runs has changed since
(transformer.reproduce.code_files, followed from tools/run_lookup.py), per
arm its record with the least wall time is trained for its first
BRIDGE_STEPS steps by the code of that commit (a temporary git worktree) and
by the code now, on this machine, one thread each; a JSON under
results/experiments/E15b/bridges/ records both loss lists and whether they
are bit-identical, written either way. A commit already bridged to the code
now is skipped. It needs committed code:

    nice -n 19 .venv/bin/python tools/bridge_e15b.py

Kept out of tools/run_lookup.py on purpose: what a tool imports is code its
records depend on, and this one imports the package's bookkeeping.
Appendix "The command line", section "Everything else the book reads".
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tool_cli import int_at_least, parser  # noqa: E402  (tools/)
from run_lookup import (BRIDGE_STEPS, BRIDGES, OUT,  # noqa: E402
                        prefix_losses)
from transformer.bench import environment, git_commit  # noqa: E402
from transformer.data import atomic_write  # noqa: E402
from transformer.reproduce import (REPRODUCE, code_differs,  # noqa: E402
                                   code_files, recorded_commit)


def bridge(steps: int = BRIDGE_STEPS, log=print) -> list[dict]:
    """The bridges this module's docstring describes; returns those it
    wrote."""
    now, tools_now = git_commit(), git_commit(folder="tools")
    if not now or "+" in now or not tools_now or "+" in tools_now:
        raise SystemExit("bridge_e15b.py: error: a bridge needs committed "
                         f"code, and it is at {now}, tools {tools_now}")
    files = code_files(REPRODUCE["e15b"], ROOT)
    by = {}
    for path in sorted(OUT.glob("*/*.json")):
        if path.parent == BRIDGES:
            continue
        rec = json.loads(path.read_text())
        c = recorded_commit(path)
        if c and code_differs(c, ROOT, files):
            by.setdefault((c, rec["arm"]), []).append((rec["wall_s"], path))
    made = []
    for (c, arm), recs in sorted(by.items()):
        name = BRIDGES / f"{c[:7]}-{now[:7]}-{arm}.json"
        if name.exists():
            continue
        path = min(recs)[1]
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            subprocess.run(["git", "worktree", "add", "--detach", "-q",
                            str(tree), c], cwd=ROOT, check=True)
            try:
                old = prefix_losses(path, tree, steps)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force",
                                str(tree)], cwd=ROOT, check=True)
        new = prefix_losses(path, ROOT, steps)
        logged = json.loads(path.read_text())["train_loss"]
        out = {"experiment": "E15b", "from": c, "to": now,
               "tools_to": tools_now, "record": str(path.relative_to(OUT)),
               "arm": arm, "steps": steps, "identical": old == new,
               "old_matches_record": old[::50] == logged[:len(old[::50])],
               "from_losses": old, "to_losses": new,
               "machine": environment()}
        atomic_write(name, json.dumps(out, indent=1) + "\n")
        log(f"{c[:7]} -> {now[:7]} ({arm}, {path.name}, {steps} steps): "
            + ("bit-identical" if old == new else "DIFFERS"))
        made.append(out)
    return made


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--steps", type=int_at_least(1), default=BRIDGE_STEPS,
                   help=f"steps trained on each side (default: "
                        f"{BRIDGE_STEPS})")
    args = p.parse_args(argv)
    bridge(args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
