"""Sphinx extension: hide `#| ...` directive lines in rendered code cells.

The directives (`#| export`, `#| default_exp`) drive tools/literate.py and
mean nothing to a reader. Lines are dropped from every code-cell source; a
cell left with no source and no output is removed entirely.
"""
from docutils import nodes

DIRECTIVE_PREFIX = "#|"


def _strip(doctree):
    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        lines = text.splitlines()
        if not lines or not lines[0].startswith(DIRECTIVE_PREFIX):
            continue
        kept = [ln for ln in lines if not ln.startswith(DIRECTIVE_PREFIX)]
        while kept and not kept[0].strip():
            kept.pop(0)
        new = "\n".join(kept)
        if new.strip():
            block.children = [nodes.Text(new)]
            block.rawsource = new
            continue
        # Directive-only cell: drop the whole cell if it shows nothing else.
        cell = block
        while cell.parent is not None and "cell" not in cell.get("classes", []):
            cell = cell.parent
        target = cell if cell.parent is not None else block
        outputs = [n for n in target.findall(nodes.container)
                   if "cell_output" in n.get("classes", [])]
        if target is cell and not outputs:
            cell.parent.remove(cell)
        else:
            block.parent.remove(block)


def on_doctree_read(app, doctree):
    _strip(doctree)


def setup(app):
    app.connect("doctree-read", on_doctree_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True,
            "version": "1.0"}
