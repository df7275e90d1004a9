"""Find chapter cells whose compared output could depend on the host.

nbval compares every output of a code cell not tagged `nbval-ignore-output`
with the committed notebook, on whatever machine runs the tests. A cell that
reads the machine (CPU model, cache sizes, core count, load, clock, thread
pool) at top level and prints or glues the result passes only on the machine
that executed the notebook. Facts about a machine belong in the committed
benchmark JSON, which records its own environment (`transformer.bench.
environment`), and the chapters read them from there.

The scan is static: it walks each compared cell's top-level statements
(function bodies are skipped: defining a reader is fine, calling it in a
compared cell is not) and reports host reads. `tools/other_host.sh` is the
dynamic complement: it runs notebooks on a simulated different machine.

    python tools/host_scan.py      # exit 1 and list the cells, if any
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from literate import chapter_paths, read_chapter  # noqa: E402

IGNORE_TAG = "nbval-ignore-output"
# Calls that read the machine or the clock (module.attr or bare name).
HOST_CALLS = {
    ("os", "cpu_count"), ("os", "getloadavg"), ("os", "sched_getaffinity"),
    ("platform", "*"), ("socket", "gethostname"), ("time", "time"),
    ("time", "strftime"), ("time", "gmtime"), ("time", "localtime"),
    ("time", "ctime"), ("datetime", "now"), ("datetime", "today"),
    ("date", "today"), ("datetime", "utcnow"), (None, "cpu_model"),
    (None, "cpu_caches"), (None, "environment"),
}
HOST_PATHS = re.compile(r"^/(sys|proc)/|^/etc/(hostname|machine-id)")


def _call_name(node: ast.Call) -> tuple[str | None, str] | None:
    f = node.func
    if isinstance(f, ast.Name):
        return None, f.id
    if isinstance(f, ast.Attribute):
        base = f.value
        if isinstance(base, ast.Name):
            return base.id, f.attr
        if isinstance(base, ast.Attribute):  # datetime.datetime.now
            return base.attr, f.attr
    return None


def _top_level_nodes(tree: ast.Module):
    """Every node outside function and class bodies."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def host_reads(source: str) -> list[str]:
    """The host reads in one cell's top-level code, as short descriptions."""
    code = "\n".join(line for line in source.splitlines()  # no magics
                     if not re.match(r"\s*[%!](?!=)", line))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ["(cell does not parse; cannot be checked)"]
    found = []
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for v in node.values}  # f-string pieces: reported whole below
    for node in _top_level_nodes(tree):
        if isinstance(node, ast.Call) and (name := _call_name(node)):
            mod, attr = name
            if (mod, attr) in HOST_CALLS or (mod, "*") in HOST_CALLS or \
                    (None, attr) in HOST_CALLS:
                found.append(f"calls {mod + '.' if mod else ''}{attr}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in parts and HOST_PATHS.search(node.value):
            found.append(f"reads {node.value!r}")
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values
                           if isinstance(v, ast.Constant))
            if HOST_PATHS.search(text):
                found.append(f"reads {text!r}")
    return sorted(set(found))


def problems(paths: list[Path] | None = None) -> list[str]:
    """One line per compared cell that reads the host."""
    out = []
    for path in paths or chapter_paths():
        nb = read_chapter(path)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or \
                    IGNORE_TAG in cell.metadata.get("tags", []):
                continue
            for what in host_reads(cell.source):
                out.append(f"{path.name} cell {i}: {what} in a cell whose "
                           f"output nbval compares (read it from committed "
                           f"JSON, or tag the cell {IGNORE_TAG} and say why)")
    return out


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) or "no compared cell reads the host")
    sys.exit(1 if found else 0)
