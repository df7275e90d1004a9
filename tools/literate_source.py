"""Reading the chapters: paths, `#|` directives, and exported cells.

The chapters (MyST markdown read by jupytext) are the only hand-edited
source. `literate_export.py` turns their `#| export` cells into
`transformer/*.py`; `literate_notebooks.py` turns them into executed
`book/*.ipynb`; `literate.py` is the command line over both.

Directives (first lines of a code cell, nbdev style):
    #| default_exp NAME   the chapter exports into transformer/NAME.py
    #| export             this cell goes into that module
    #| export NAME        this cell goes into transformer/NAME.py instead
                          (nbdev's per-cell target): a chapter may own
                          several modules, a module has exactly one chapter
    #| command_line       (with default_exp) the module is the command line:
                          `python -m transformer` runs its `main`, and the
                          package does not re-export its names
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path


class Paths:
    """Where the tree is; tests point these at a copy of it."""
    ROOT = Path(__file__).resolve().parents[1]
    CHAPTERS = ROOT / "chapters"
    BOOK = ROOT / "book"
    PACKAGE = ROOT / "transformer"


DIRECTIVE = re.compile(r"^#\|\s*(\S+)\s*(.*?)\s*$")


@dataclass
class Chapter:
    path: Path
    module: str | None = None
    cells: list[str] = field(default_factory=list)  # exported sources
    command_line: bool = False
    # cells sent elsewhere by `#| export NAME`, {module: sources}
    others: dict[str, list[str]] = field(default_factory=dict)

    def modules(self) -> dict[str, list[str]]:
        """{module: its exported sources}, the default module first."""
        own = {self.module: self.cells} if self.module else {}
        return {**own, **self.others}

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def rel(self) -> str:
        return self.path.relative_to(Paths.ROOT).as_posix()


def directives(source: str) -> tuple[dict[str, str], str]:
    """Split leading `#| key value` lines off a cell; return (dict, rest)."""
    found: dict[str, str] = {}
    lines = source.splitlines()
    i = 0
    while i < len(lines) and (m := DIRECTIVE.match(lines[i])):
        found[m.group(1)] = m.group(2)
        i += 1
    return found, "\n".join(lines[i:]).strip("\n")


def chapter_paths(names: list[str] | None = None) -> list[Path]:
    paths = sorted(Paths.CHAPTERS.glob("*.md"))
    if names:
        wanted = {Path(n).stem for n in names}
        unknown = wanted - {p.stem for p in paths}
        if unknown:
            raise SystemExit(f"no chapter named {sorted(unknown)} in chapters/")
        paths = [p for p in paths if p.stem in wanted]
    return paths


def read_chapter(path: Path):
    import jupytext

    return jupytext.read(path)


def parse_chapter(path: Path) -> Chapter:
    ch = Chapter(path)
    for cell in read_chapter(path).cells:
        if cell.cell_type != "code":
            continue
        found, body = directives(cell.source)
        if "default_exp" in found:
            if ch.module is not None:
                raise ValueError(f"{ch.rel}: two `#| default_exp` cells")
            ch.module = found["default_exp"]
            ch.command_line = "command_line" in found
        if "export" in found:
            target = found["export"]
            if not target:
                ch.cells.append(body)
            elif not re.fullmatch(r"[a-z_][a-z0-9_]*", target):
                raise ValueError(f"{ch.rel}: `#| export {target}` is not a "
                                 "module name (lower case, digits, _)")
            else:
                ch.others.setdefault(target, []).append(body)
    if ch.cells and ch.module is None:
        raise ValueError(f"{ch.rel}: `#| export` cells but no `#| default_exp`")
    if ch.module in ch.others:  # `#| export NAME` naming the default module
        ch.cells += ch.others.pop(ch.module)
    return ch


def chapter_definition(chapter: str, name: str):
    """A teaching definition that lives only in a chapter (never exported),
    loaded from the chapter's source so that tests and tools hold no copy.

    Runs the one code cell that defines `name` at top level, in a namespace
    holding the chapter's own exported module, and returns the object."""
    import importlib

    path = Paths.CHAPTERS / f"{chapter}.md"
    ch = parse_chapter(path)
    namespace: dict = {}
    for module in ch.modules():
        namespace.update(vars(importlib.import_module(
            f"transformer.{module}")))
    for cell in read_chapter(path).cells:
        if cell.cell_type != "code":
            continue
        body = directives(cell.source)[1]
        defined = [n.name for n in ast.parse(body).body
                   if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        if name in defined:
            exec(compile(body, f"{path.name}:{name}", "exec"), namespace)
            return namespace[name]
    raise LookupError(f"{path.relative_to(Paths.ROOT)} defines no {name!r}")
