"""Chapters -> executed book/*.ipynb, the execution record, and the checks.

Notebooks are generated one way from the chapters with stable cell ids (no
git churn), executed in book/ (where nbval and jupyter-book run them), and
each execution is recorded in results/notebook_execution.json, from which
book/status.md is generated.
"""
from __future__ import annotations

import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path

from literate_source import Paths, chapter_paths, read_chapter

VERSIONED = ("torch", "numpy", "matplotlib", "regex", "tqdm", "jupyter-book",
             "myst-nb", "sphinx", "jupytext", "nbclient", "nbval", "pytest",
             "hypothesis", "transformers", "tiktoken", "tokenizers")


def cell_signature(cell) -> tuple:
    """What the page shows of a cell: its source, tags and myst-nb options
    (a figure's caption); never its outputs."""
    meta = cell.get("metadata", {})
    tags = tuple(meta.get("tags", []))
    mystnb = json.dumps(meta.get("mystnb"), sort_keys=True) \
        if "mystnb" in meta else None
    return cell.cell_type, cell.source.strip("\n"), tags, mystnb


def notebook_from_chapter(path: Path):
    nb = read_chapter(path)
    for i, cell in enumerate(nb.cells):
        cell.id = f"{path.stem[:40]}-{i:03d}"  # stable ids: no git churn
    return nb


def generate(names: list[str] | None = None) -> None:
    import nbformat

    for path in chapter_paths(names):
        out = Paths.BOOK / f"{path.stem}.ipynb"
        nbformat.write(notebook_from_chapter(path), out)
        print(f"wrote {out.relative_to(Paths.ROOT)} (not executed yet)")


def kernel_env() -> dict[str, str]:
    """The environment every kernel runs in (the executor's and nbval's).

    PYTHONPATH puts this checkout's `transformer/` first, so a worktree or a
    clone never imports another copy; the thread count is pinned because
    float reductions (and hence printed digits) depend on it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Paths.ROOT)] + [p for p in env.get("PYTHONPATH", "")
                             .split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "2")
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("TRANSFORMER_ROOT", str(Paths.ROOT))
    return env


# Figures at twice their pixel density, shown at the same size (the PNG's
# width and height travel in the output's metadata): sharp on a HiDPI screen,
# the page's layout unchanged. nbval does not compare image/* outputs, and a
# glued figure's PNG (papermill's record type, which it would compare) is masked
# by tests/nbval_sanitize.cfg, so a kernel started without this (pytest's)
# compares the same outputs.
KERNEL_ARGS = ["--InlineBackend.figure_formats=retina"]


def execute(names: list[str] | None = None) -> None:
    import nbformat
    from nbclient import NotebookClient

    os.environ.update(kernel_env())
    timings = {}
    for path in chapter_paths(names):
        out = Paths.BOOK / f"{path.stem}.ipynb"
        nb = notebook_from_chapter(path)
        start = time.perf_counter()
        NotebookClient(nb, timeout=1800, kernel_name="python3",
                       record_timing=False, extra_arguments=KERNEL_ARGS,
                       resources={"metadata": {"path": str(Paths.BOOK)}}
                       ).execute()
        timings[path.stem] = time.perf_counter() - start
        nbformat.write(nb, out)
        print(f"executed {out.relative_to(Paths.ROOT)} "
              f"in {timings[path.stem]:.1f} s")
    record_execution(timings)


def refresh(names: list[str] | None = None) -> list[str]:
    """Carry prose and tag edits into executed notebooks without re-running.

    A notebook is refreshed only when its code cells, in order, have exactly
    the chapter's sources: then every output it holds was made by the code the
    chapter now shows, and only markdown cells and cell tags (what the page
    shows, never what nbval compares) are taken from the chapter. A chapter
    whose code changed is named, with the command that re-executes it; nothing
    is written for it. Returns those names."""
    import nbformat

    stale = []
    for path in chapter_paths(names):
        out = Paths.BOOK / f"{path.stem}.ipynb"
        want = notebook_from_chapter(path)
        if not out.exists():
            stale.append(path.stem)
            continue
        have = nbformat.read(out, as_version=4)
        code = lambda nb: [c.source.strip("\n") for c in nb.cells  # noqa: E731
                           if c.cell_type == "code"]
        if code(want) != code(have):
            stale.append(path.stem)
            print(f"{path.stem}: code cells changed; run "
                  f"`make notebooks NB={path.stem}`")
            continue
        outputs = iter([c for c in have.cells if c.cell_type == "code"])
        for i, cell in enumerate(want.cells):
            if cell.cell_type == "code":
                old = next(outputs)
                cell.outputs = old.outputs
                cell.execution_count = old.execution_count
        want.metadata = have.metadata
        if [cell_signature(c) for c in want.cells] != \
                [cell_signature(c) for c in have.cells]:
            nbformat.write(want, out)
            print(f"refreshed {out.relative_to(Paths.ROOT)} (outputs kept)")
    return stale


def status_json() -> Path:
    return Paths.ROOT / "results" / "notebook_execution.json"


def status_page() -> Path:
    return Paths.BOOK / "status.md"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def record_execution(timings: dict[str, float]) -> None:
    """Keep the latest execution of each notebook; regenerate the status page."""
    data = {"notebooks": {}}
    if status_json().exists():
        data = json.loads(status_json().read_text())
    for name, secs in timings.items():
        data["notebooks"][name] = {
            "seconds": round(secs, 1),
            "executed": time.strftime("%Y-%m-%d", time.gmtime()),
        }
    known = {p.stem for p in chapter_paths()}
    data["notebooks"] = {k: v for k, v in sorted(data["notebooks"].items())
                         if k in known}
    data["packages"] = package_versions()
    status_json().parent.mkdir(exist_ok=True)
    status_json().write_text(json.dumps(data, indent=1) + "\n")
    status_page().write_text(render_status(data))
    print(f"wrote {status_json().relative_to(Paths.ROOT)} and "
          f"{status_page().relative_to(Paths.ROOT)}")


def render_status(data: dict) -> str:
    """book/status.md, generated from results/notebook_execution.json."""
    lines = [
        "(app-status)=",
        "# Status: execution and versions",
        "",
        "Generated by `tools/literate.py` from",
        "`results/notebook_execution.json` each time notebooks are executed",
        "(`make notebooks`); do not edit. Times are wall-clock seconds on the",
        "machine that last executed the notebook, kernel start included; the",
        "test suite re-executes every notebook and compares its outputs.",
        "",
        "| notebook | chapter source | last executed | seconds |",
        "|---|---|---|---|",
    ]
    for name, rec in data["notebooks"].items():
        lines.append(f"| [{name}]({name}.ipynb) | `chapters/{name}.md` | "
                     f"{rec['executed']} | {rec['seconds']} |")
    total = sum(r["seconds"] for r in data["notebooks"].values())
    lines += [f"| **all** | | | {total:.1f} |", "",
              "## Package versions", "",
              "The versions the notebooks were last executed with.", "",
              "| package | version |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in data["packages"].items()]
    return "\n".join(lines) + "\n"


def status_problems() -> list[str]:
    rel = status_json().relative_to(Paths.ROOT)
    if not status_json().exists():
        return [f"{rel} missing: run `make notebooks`"]
    data = json.loads(status_json().read_text())
    problems = []
    missing = {p.stem for p in chapter_paths()} - set(data["notebooks"])
    if missing:
        problems.append(f"no execution record for {sorted(missing)}: "
                        "run `make notebooks`")
    if not status_page().exists() or \
            status_page().read_text() != render_status(data):
        problems.append("book/status.md is stale: run `make notebooks`")
    return problems


def notebook_problems() -> list[str]:
    """Notebooks out of step with their chapters, as messages."""
    import nbformat

    problems = []
    chapters = {p.stem: p for p in chapter_paths()}
    rel = lambda p: p.relative_to(Paths.ROOT)  # noqa: E731
    for nb_path in sorted(Paths.BOOK.glob("*.ipynb")):
        if nb_path.stem not in chapters:
            problems.append(f"{rel(nb_path)} has no chapter "
                            f"chapters/{nb_path.stem}.md: delete it")
    for stem, md in chapters.items():
        nb_path = Paths.BOOK / f"{stem}.ipynb"
        regen = f"run `make notebooks NB={stem}`"
        if not nb_path.exists():
            problems.append(f"{rel(nb_path)} is missing: {regen}")
            continue
        want = [cell_signature(c) for c in read_chapter(md).cells]
        have_nb = nbformat.read(nb_path, as_version=4)
        have = [cell_signature(c) for c in have_nb.cells]
        if want != have:
            first = next((i for i, (a, b) in enumerate(zip(want, have))
                          if a != b), min(len(want), len(have)))
            problems.append(
                f"{rel(nb_path)} differs from {rel(md)} at cell {first} "
                f"(notebook edited by hand, or chapter changed since): "
                f"{regen}")
            continue
        unexecuted = [i for i, c in enumerate(have_nb.cells)
                      if c.cell_type == "code" and c.execution_count is None]
        if unexecuted:
            problems.append(f"{rel(nb_path)} has unexecuted cells "
                            f"{unexecuted[:5]}: {regen}")
    return problems
