"""What the rendered page shows: no raw `$`-LaTeX left in prose, no print
loop cut into many output boxes, no output line wider than the page, and
every figure captioned.

The `$` check parses every markdown cell (and the front-matter pages) with
the book's own MyST settings (dollarmath, amsmath, colon fences) and fails on
a `$` that reached the text instead of becoming math: the chapter 14 case,
where an inline formula wrapped so that a source line began with `- ` and
became a list item, showing its LaTeX raw."""
import re

import nbformat
import pytest
from markdown_it.token import Token
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser
from myst_parser.mdit_to_docutils.base import DocutilsRenderer

import figure_captions
import hide_directives
import literate
from literate_source import Paths

PARSER = create_md_parser(
    MdParserConfig(enable_extensions={"dollarmath", "amsmath", "colon_fence",
                                      "deflist"}), DocutilsRenderer)


def raw_dollars(markdown: str) -> list[str]:
    """Text that still holds an unescaped `$` after MyST parsing."""
    found = []

    def walk(tokens: list[Token]):
        for t in tokens:
            if t.type == "text" and "$" in t.content:
                found.append(t.content)
            if t.children:
                walk(t.children)

    walk(PARSER.parse(markdown.replace("\\$", "DOLLAR")))  # `\$` is text
    return found


def markdown_sources():
    for path in sorted(Paths.CHAPTERS.glob("*.md")):
        nb = literate.read_chapter(path)
        yield path.stem, "\n\n".join(c.source for c in nb.cells
                                     if c.cell_type == "markdown")
    for path in sorted((Paths.ROOT / "book").glob("*.md")):
        yield path.name, path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name,text", list(markdown_sources()),
                         ids=lambda v: v if isinstance(v, str) and
                         len(v) < 40 else "")
def test_no_raw_latex_in_prose(name, text):
    assert raw_dollars(text) == [], f"{name}: `$` left unrendered"


def test_the_check_catches_the_chapter_14_case():
    broken = ("Because $|a_b| \\cdot |x_n\n- c_n)|$, it is also a sum.")
    assert raw_dollars(broken)  # the line became a bullet: raw LaTeX
    assert raw_dollars("Because $|a_b| \\cdot |x_n - c_n)|$, a sum.") == []
    assert raw_dollars("It costs \\$5, with math $x$.") == []


# Chapters whose executed notebooks still hold a cell whose text output is
# more than MAX_BOXES boxes after the page joins adjacent ones (a cell that
# prints between rich outputs): the set can only shrink. A figure is not a
# text box (a figure with its numbers printed under it is not a split), and a
# stream the page removes (the `remove-stderr` tag) shows nothing.
MAX_BOXES = 1
PENDING: set[str] = set()


def shown_boxes(cell) -> int:
    """Text boxes a reader sees: glue records and figures are not counted,
    and adjacent boxes of one stream are joined on the page
    (tools/hide_directives.py)."""
    tags = cell.get("metadata", {}).get("tags", [])
    if "remove-output" in tags:
        return 0
    boxes, last = 0, None
    for o in cell.outputs:
        data = o.get("data", {})
        if any(k.startswith("application/papermill.record/") for k in data):
            continue
        if "image/png" in data:
            last = None  # a figure between two prints keeps them apart
            continue
        name = o.get("name")
        if o.output_type == "stream" and f"remove-{name}" in tags:
            continue
        kind = (o.output_type, name)
        if o.output_type == "stream" and kind == last:
            continue
        boxes, last = boxes + 1, kind
    return boxes


def split_cells(name: str) -> list[int]:
    nb = nbformat.read(Paths.BOOK / f"{name}.ipynb", as_version=4)
    return [shown_boxes(c) for c in nb.cells if c.cell_type == "code"
            if shown_boxes(c) > MAX_BOXES]


def test_no_print_loop_is_cut_into_many_boxes():
    names = sorted(p.stem for p in Paths.CHAPTERS.glob("*.md"))
    over = {n for n in names if split_cells(n)}
    assert over <= PENDING, f"new split outputs in {sorted(over - PENDING)}"
    assert PENDING <= over, (f"{sorted(PENDING - over)} no longer split: "
                             "take them out of PENDING")


def test_split_check_counts_what_the_page_shows():
    out = nbformat.v4.new_output
    glue = out("display_data", data={
        "application/papermill.record/text/plain": "'1'"})
    figure = out("display_data", data={"image/png": "", "text/plain": "F"})
    cell = nbformat.v4.new_code_cell("", outputs=[
        out("stream", name="stdout", text="a\n"), glue,
        out("stream", name="stdout", text="b\n"), glue,
        out("stream", name="stdout", text="c\n"),
        out("stream", name="stderr", text="w\n"),
        out("stream", name="stdout", text="d\n"), figure])
    assert shown_boxes(cell) == 3  # a+b+c joined, stderr, d; no figure
    cell.metadata["tags"] = ["remove-stderr"]
    assert shown_boxes(cell) == 1  # a+b+c+d, the stderr removed
    cell.outputs.insert(1, figure)  # a figure between a and b
    assert shown_boxes(cell) == 2


# An output line wider than this many characters scrolls sideways at a
# 1280 px window (the page's output type, book/_static/reader.css: measured
# with tools/page_metrics.py, 101 fit); a cell tagged `wrap-output` (a
# transcript of messages) wraps at the column instead.
MAX_OUTPUT_CHARS = 100


def wide_output_lines(cell) -> list[str]:
    tags = cell.get("metadata", {}).get("tags", [])
    if {"remove-output", "remove-cell", "wrap-output"} & set(tags):
        return []
    wide = []
    for o in cell.outputs:
        if o.output_type == "stream" and f"remove-{o.name}" not in tags:
            text = o.text
        elif o.output_type == "execute_result":
            text = o.data.get("text/plain", "")
        elif o.output_type == "error":
            text = f"{o.ename}: {o.evalue}"
        else:
            continue
        wide += [line for line in text.split("\n")
                 if len(line) > MAX_OUTPUT_CHARS]
    return wide


@pytest.mark.parametrize("name", sorted(
    p.stem for p in Paths.CHAPTERS.glob("*.md")))
def test_no_output_line_is_wider_than_the_page(name):
    nb = nbformat.read(Paths.BOOK / f"{name}.ipynb", as_version=4)
    wide = [line[:60] for c in nb.cells if c.cell_type == "code"
            for line in wide_output_lines(c)]
    assert not wide, (f"{len(wide)} output lines over {MAX_OUTPUT_CHARS} "
                      f"characters (shorten them, or tag a transcript "
                      f"`wrap-output`): {wide[:3]}")


def test_width_check_counts_what_the_page_shows():
    out = nbformat.v4.new_output
    cell = nbformat.v4.new_code_cell("", outputs=[
        out("stream", name="stdout", text="x" * 101 + "\n" + "y" * 100)])
    assert len(wide_output_lines(cell)) == 1
    cell.metadata["tags"] = ["wrap-output"]
    assert wide_output_lines(cell) == []


def test_every_figure_has_a_caption():
    assert figure_captions.problems() == []


# `{glue:text}` pastes a value as plain text, so LaTeX inside a glued string
# shows raw; chapters allowed to still do so (empty since chapter 10's
# `cache_story` says "the values"): the set can only shrink.
GLUED_DOLLAR_PENDING: set[str] = set()


def glued_text_with_dollar(name: str) -> list[str]:
    nb = nbformat.read(Paths.BOOK / f"{name}.ipynb", as_version=4)
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    found = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            key = o.get("metadata", {}).get("scrapbook", {}).get("name")
            text = o.get("data", {}).get(
                "application/papermill.record/text/plain", "")
            if key and "$" in text and "{glue:text}`" + key in prose:
                found.append(key)
    return found


def test_no_glued_text_carries_latex():
    names = sorted(p.stem for p in Paths.CHAPTERS.glob("*.md"))
    over = {n for n in names if glued_text_with_dollar(n)}
    assert over <= GLUED_DOLLAR_PENDING, sorted(over - GLUED_DOLLAR_PENDING)
    assert GLUED_DOLLAR_PENDING <= over, "fixed: shrink GLUED_DOLLAR_PENDING"


def test_every_figure_is_referenced_from_its_chapters_prose():
    """A reader meets each numbered figure from the text that explains
    it: every caption's name appears as {numref}`name` in its chapter."""
    missing = [(chapter, name)
               for chapter, entries in figure_captions.CAPTIONS.items()
               for _, name, _ in entries
               if f"{{numref}}`{name}`" not in
               (Paths.CHAPTERS / f"{chapter}.md").read_text()]
    assert not missing, missing


def glued_twice(nb) -> list[str]:
    """Glue keys recorded by more than one output of a notebook: the book's
    build (myst-nb) warns on each, and a warning fails the build."""
    from collections import Counter
    names = Counter(o.get("metadata", {}).get("scrapbook", {}).get("name")
                    for cell in nb.cells for o in cell.get("outputs", []))
    return sorted(k for k, n in names.items() if k and n > 1)


def test_no_notebook_glues_a_key_twice():
    found = {p.name: twice for p in sorted(Paths.BOOK.glob("*.ipynb"))
             if (twice := glued_twice(nbformat.read(p, as_version=4)))}
    assert not found, found


def test_a_key_glued_twice_is_found():
    out = {"output_type": "display_data", "data": {},
           "metadata": {"scrapbook": {"name": "k"}}}
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(outputs=[out]),
        nbformat.v4.new_code_cell(outputs=[dict(out)])])
    assert glued_twice(nb) == ["k"]
