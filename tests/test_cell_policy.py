"""The cell policy (tools/cell_policy.py): every chapter conforms, and the
check fails on each breach it names (planted chapters in a temporary tree)."""
import pytest

import cell_policy as cp  # tools/, put on sys.path by the root conftest.py
import hide_directives
from literate_source import Paths


def test_every_chapter_follows_the_policy():
    assert cp.check() == []


PLANTED = """\
# A chapter

## Setup

```{code-cell} ipython3
import torch
x = torch.ones(3)
print(x.sum())
```

```{code-cell} ipython3
from myst_nb import glue
glue("n", 3, display=False)
assert 3 == 3
```

```{code-cell} ipython3
#| export
def _check_x(x):
    if x < 0:
        raise ValueError("x")
```

## Plumbing

```{code-cell} ipython3
:tags: [nbval-ignore-output]
y = 2
print(y)
```
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "book").mkdir()
    (tmp_path / "chapters" / "99_planted.md").write_text(PLANTED)
    monkeypatch.setattr(Paths, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(Paths, "BOOK", tmp_path / "book")
    monkeypatch.setattr(cp, "TABLE", {})
    return tmp_path / "chapters" / "99_planted.md"


def test_glue_only_and_checker_cells_left_visible_fail(tree):
    problems = cp.check(["99_planted"])
    assert any("only glues or asserts and is shown" in p for p in problems)
    assert any("holds only argument checkers" in p for p in problems)
    assert len(problems) == 2


def test_apply_sets_tags_only_and_is_idempotent(tree):
    cp.TABLE["99_planted"] = [
        ('from myst_nb import glue\nglue("n"', "remove-cell"),
        ("def _check_x(x):", "hide-input"),
        ("§Plumbing", "hide-input")]
    before = [c.source for c in cp.code_cells(tree.read_text())]
    assert cp.apply(["99_planted"]) == ["99_planted"]
    text = tree.read_text()
    cells = cp.code_cells(text)
    assert [c.source for c in cells] == before  # code untouched
    assert [c.tags for c in cells] == [
        [], ["remove-cell"], ["hide-input"],
        ["nbval-ignore-output", "hide-input"]]
    assert cp.check(["99_planted"]) == []
    assert cp.apply(["99_planted"]) == []  # idempotent
    assert tree.read_text() == text
    # the table is the whole truth: an entry taken out takes its tag off
    cp.TABLE["99_planted"] = cp.TABLE["99_planted"][1:]
    problems = cp.check(["99_planted"])
    assert any("has ['remove-cell'] policy tag, the table says none" in p
               for p in problems)
    cp.apply(["99_planted"])
    assert cp.code_cells(tree.read_text())[1].tags == []


def test_an_entry_that_finds_no_cell_fails_loudly(tree):
    cp.TABLE["99_planted"] = [("z = 41", "hide-input"),
                              ("§No such section", "hide-input"),
                              ("import torch", "fold-please")]
    problems = cp.check(["99_planted"])
    assert any("no cell starts with 'z = 41'" in p for p in problems)
    assert any("no heading '§No such section'" in p for p in problems)
    assert any("'fold-please' is not a policy tag" in p for p in problems)
    with pytest.raises(SystemExit):
        cp.apply(["99_planted"])


def test_an_ambiguous_entry_fails(tree):
    tree.write_text(PLANTED.replace("y = 2", "import torch\ny = 2"))
    cp.TABLE["99_planted"] = [("import torch", "hide-input")]
    assert any("2 cells start with 'import torch'" in p
               for p in cp.check(["99_planted"]))


def test_removing_a_cell_that_shows_output_fails(tree):
    import nbformat

    cp.TABLE["99_planted"] = [("import torch", "remove-cell"),
                              ("from myst_nb", "remove-cell"),
                              ("def _check_x", "hide-input")]
    cp.apply(["99_planted"])
    nb = nbformat.v4.new_notebook()
    outs = [[nbformat.v4.new_output("stream", name="stdout", text="3.\n")],
            [], [], []]
    nb.cells = [nbformat.v4.new_code_cell("", outputs=o) for o in outs]
    nbformat.write(nb, Paths.BOOK / "99_planted.ipynb")
    problems = cp.check(["99_planted"])
    assert problems == ["99_planted: cell 'import torch' is removed but "
                        "shows an output (use remove-input)"]


def test_rendered_code_drops_glue_statements_only():
    src = ("from myst_nb import glue\nx = 1\nglue('a', x,\n     display=False)"
           "\n\nfor k in 'ab':\n    glue(k, 1)\nif x:\n    glue('c', 2)\n"
           "print(x)")
    assert hide_directives.drop_glue(src) == (
        "x = 1\n\nif x:\n    glue('c', 2)\nprint(x)")
    assert hide_directives.drop_glue("def f(:\n") == "def f(:\n"


def test_adjacent_stream_boxes_of_one_cell_are_joined():
    from docutils import nodes

    def box(text, cls):
        return nodes.literal_block(text, text, classes=["output", cls])

    out = nodes.container(classes=["cell_output"])
    out += [box("header\n", "stream"), box("row 1\n", "stream"),
            box("row 2", "stream"), box("warn", "stderr"),
            box("after", "stream")]
    doc = nodes.section()
    doc += out
    hide_directives.merge_streams(doc)
    assert [c.astext() for c in out.children] == [
        "header\nrow 1\nrow 2", "warn", "after"]


def test_entries_for_a_chapter_that_is_gone_fail(tree):
    cp.TABLE["98_split_away"] = [("import torch", "hide-input")]
    assert any("98_split_away: TABLE names a chapter that does not exist" in p
               for p in cp.check())


def test_a_section_named_twice_needs_its_level(tree):
    tree.write_text(PLANTED + "\n### Plumbing\n\n```{code-cell} ipython3\n"
                    "z = 3\n```\n")
    cp.TABLE["99_planted"] = [("§Plumbing", "hide-input")]
    assert any("no heading '§Plumbing', or more than one" in p
               for p in cp.check(["99_planted"]))
    cp.TABLE["99_planted"] = [
        ("§### Plumbing", "hide-input"),
        ('from myst_nb import glue\nglue("n"', "remove-cell"),
        ("def _check_x(x):", "hide-input")]
    cp.apply(["99_planted"])
    assert [c.tags for c in cp.code_cells(tree.read_text())] == [
        [], ["remove-cell"], ["hide-input"], ["nbval-ignore-output"],
        ["hide-input"]]
