"""Every numbered chapter opens with its question box (tools/chapter_boxes.py),
and every number the box shows is glued in that chapter's own notebook."""
import nbformat
import pytest

import chapter_boxes as cb  # tools/, put on sys.path by the root conftest.py
from literate_source import Paths


def glued_keys(name: str) -> set[str]:
    nb = nbformat.read(Paths.BOOK / f"{name}.ipynb", as_version=4)
    return {o["metadata"]["scrapbook"]["name"]
            for c in nb.cells if c.cell_type == "code"
            for o in c.outputs
            if "scrapbook" in o.get("metadata", {})}


def test_every_numbered_chapter_has_its_box():
    assert cb.problems() == []


@pytest.mark.parametrize("name", sorted(cb.BOXES))
def test_box_keys_are_glued_in_their_chapter(name):
    used = cb.keys(name)
    assert used, f"{name}: the box shows no measured number"
    missing = set(used) - glued_keys(name)
    assert not missing, f"{name}: box names keys its notebook never glues"


def test_box_sits_under_the_title_and_apply_is_idempotent():
    text = "---\nfront: 1\n---\n\n(ch-x)=\n# Title\n\nFirst paragraph.\n"
    once = cb.with_box("01_softmax", text)
    assert once.index("# Title") < once.index(":::{admonition}") \
        < once.index("First paragraph.")
    assert cb.with_box("01_softmax", once) == once
    # a stale box is replaced, never duplicated
    stale = once.replace("without overflowing", "quickly")
    again = cb.with_box("01_softmax", stale)
    assert again == once and again.count("chapter-box") == 1
    # a box naming a key the chapter does not glue is caught
    cb.BOXES["01_softmax"] = ("Q?", "{glue:text}`no_such_key`")
    try:
        assert "no_such_key" in set(cb.keys("01_softmax")) - glued_keys(
            "01_softmax")
    finally:
        import importlib
        importlib.reload(cb)
