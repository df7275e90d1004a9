"""What the rendered page shows: no raw `$`-LaTeX left in prose, no print
loop cut into many output boxes, and every figure captioned.

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


# Chapters whose executed notebooks still hold a cell with more than
# MAX_BOXES stream boxes after the page joins adjacent ones (a cell that
# prints between rich outputs, or a live log): the set can only shrink.
MAX_BOXES = 3
PENDING = {"15_ablations"}


def shown_boxes(cell) -> int:
    """Output boxes a reader sees: glue records show nothing, and adjacent
    boxes of one stream are joined on the page (tools/hide_directives.py)."""
    boxes, last = 0, None
    for o in cell.outputs:
        data = o.get("data", {})
        if any(k.startswith("application/papermill.record/") for k in data):
            continue
        kind = (o.output_type, o.get("name"))
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
    cell = nbformat.v4.new_code_cell("", outputs=[
        out("stream", name="stdout", text="a\n"), glue,
        out("stream", name="stdout", text="b\n"), glue,
        out("stream", name="stdout", text="c\n"),
        out("stream", name="stderr", text="w\n"),
        out("stream", name="stdout", text="d\n")])
    assert shown_boxes(cell) == 3  # a+b+c joined, stderr, d


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
