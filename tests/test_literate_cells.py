"""A chapter derives a step, then shows the code for that step.

So each `#| export` cell is short (one definition, or a few that belong
together), and the equation labels its docstrings cite (`eq. (label)`,
`(eq-...)`) are labels some chapter defines. Each check is also run on
planted in-memory cells, so a check that cannot fail would fail here."""
import ast
import re

import pytest

import literate  # tools/, put on sys.path by the root conftest.py

MAX_LINES = 60  # of an export cell's source, its `#|` lines included

# Chapters whose export cells are still longer than MAX_LINES, pending the
# same split (one definition per cell, right after the move it derives).
# The set can only shrink: a chapter listed here that no longer needs to
# be is an error too, so remove it from the set when its split lands.
# export cells over the limit that this round's merges brought in; each is
# to be split one definition per cell (the set may only shrink)
# (97_sweeps holds chapter 16's long cells, moved there with their section)
PENDING: set[str] = {"06_gpt", "07_bigram", "09_training", "13_error_bars",
                     "15_ablations", "20_speculative", "21_rope_base",
                     "95_cli", "97_sweeps"}

# `$$ ... $$ (label)` closes a numbered equation (its line may be indented,
# inside a list item); `(label)=` alone on a line is a target
LABEL_DEFS = re.compile(
    r"^[ \t]*(?:.*\$\$[ \t]*\(([^()\s]+)\)|\(([^()\s]+)\)=)[ \t]*$",
    re.MULTILINE)
# `eq. (label)` anywhere, or any parenthesised `(eq-...)`; a citation may
# wrap between `eq.` and its label
CITATIONS = re.compile(r"\beq\.\s*\(([^()\s]+)\)|\((eq-[\w.-]+)\)")


def code_cells(path) -> list[tuple[int, str]]:
    """(index in the notebook, source) of each code cell of a chapter."""
    return [(i, c.source) for i, c in enumerate(
        literate.read_chapter(path).cells) if c.cell_type == "code"]


def export_bodies(cells: list[tuple[int, str]]) -> list[str]:
    """The sources of the `#| export` cells, directives off."""
    return [body for found, body in (literate.directives(src)
                                     for _, src in cells)
            if "export" in found]


def long_export_cells(cells: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(cell index, lines) of each export cell longer than MAX_LINES."""
    return [(i, len(src.splitlines())) for i, src in cells
            if "export" in literate.directives(src)[0]
            and len(src.splitlines()) > MAX_LINES]


def defined_labels(markdown: str) -> set[str]:
    return {a or b for a, b in LABEL_DEFS.findall(markdown)}


def docstrings(body: str) -> list[tuple[str, str]]:
    """(name, docstring) of the module and of every class and function,
    nested ones included, in an exported cell."""
    found = []
    for node in ast.walk(ast.parse(body)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                found.append((getattr(node, "name", "<module>"), doc))
    return found


def cited_labels(body: str) -> list[tuple[str, str]]:
    """(definition, label) for each equation label a docstring cites."""
    return [(name, a or b) for name, doc in docstrings(body)
            for a, b in CITATIONS.findall(doc)]


def unknown_citations(bodies: list[str], labels: set[str]) -> list[str]:
    return [f"{name} cites eq. ({label})"
            for body in bodies for name, label in cited_labels(body)
            if label not in labels]


def all_labels() -> set[str]:
    return {label for p in literate.chapter_paths()
            for label in defined_labels(p.read_text())}


def test_export_cells_fit_the_limit_and_pending_only_shrinks():
    problems = []
    for path in literate.chapter_paths():
        long = long_export_cells(code_cells(path))
        if long and path.stem not in PENDING:
            problems.append(f"chapters/{path.name}: export cells longer than "
                            f"{MAX_LINES} lines (cell index, lines): {long}; "
                            "split them, one definition per cell, each "
                            "after the move it implements")
        if not long and path.stem in PENDING:
            problems.append(f"{path.stem} is in PENDING but no longer has a "
                            "long export cell: remove it from PENDING")
    stems = {p.stem for p in literate.chapter_paths()}
    problems += [f"PENDING names {name}, which is no chapter"
                 for name in sorted(PENDING - stems)]
    assert not problems, "\n".join(problems)


def test_cited_equation_labels_exist():
    labels = all_labels()
    problems = []
    cited = 0
    for path in literate.chapter_paths():
        bodies = export_bodies(code_cells(path))
        cited += sum(len(cited_labels(b)) for b in bodies)
        problems += [f"chapters/{path.name}: {p}, a label no chapter "
                     "defines" for p in unknown_citations(bodies, labels)]
    assert not problems, "\n".join(problems)
    assert cited >= 10, "the docstrings cite (almost) no equation labels"


# planted cells: the checks above must reject them

def cell(n_lines: int) -> str:
    return "#| export\n" + "\n".join(f"x{i} = {i}"
                                     for i in range(n_lines - 1))


def test_planted_long_cell_is_caught():
    cells = list(enumerate(["#| default_exp m", cell(MAX_LINES),
                            "print(1)\n" * 99, cell(MAX_LINES + 1)]))
    assert long_export_cells(cells) == [(3, MAX_LINES + 1)]
    assert long_export_cells(cells[:3]) == []


PLANTED = '''def f(x):
    """Implements eq. (eq-softmax) and, wrapped, eq.
    (eq-nowhere); see also (eq-missing-too)."""


class C:
    def g(self):
        """Eq. (eq-log-softmax) in a method."""
'''


def test_planted_bad_label_is_caught():
    labels = {"eq-softmax", "eq-log-softmax"}
    assert cited_labels(PLANTED) == [("f", "eq-softmax"),
                                     ("f", "eq-nowhere"),
                                     ("f", "eq-missing-too"),
                                     ("g", "eq-log-softmax")]
    assert unknown_citations([PLANTED], labels) == [
        "f cites eq. (eq-nowhere)", "f cites eq. (eq-missing-too)"]
    assert unknown_citations([PLANTED], labels | {
        "eq-nowhere", "eq-missing-too"}) == []


@pytest.mark.parametrize("markdown, expected", [
    ("$$\na = b\n$$ (eq-a)\n", {"eq-a"}),
    ("(sec-intro)=\n# Intro\n", {"sec-intro"}),
    ("- item\n\n  $$\n  a = b\n  $$ (eq-b)\n", {"eq-b"}),  # indented
    ("$$ a = b $$ (eq-c)\n", {"eq-c"}),  # one line
    ("$$\na = b\n$$\n", set()),  # an unnumbered equation defines nothing
    ("see {eq}`eq-a` and (eq-b) in the text\n", set()),  # citations only
])
def test_label_definitions_are_read(markdown, expected):
    assert defined_labels(markdown) == expected


def test_real_labels_are_found():
    labels = all_labels()
    assert {"eq-softmax", "eq-softmax-shift", "eq-cross-entropy",
            "ch-softmax"} <= labels
