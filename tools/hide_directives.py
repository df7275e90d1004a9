"""Sphinx extension: hide `#| ...` directive lines and `glue(...)` calls in
rendered code cells.

The directives (`#| export`, `#| default_exp`) drive tools/literate.py and
mean nothing to a reader. Lines are dropped from every code-cell source; a
cell left with no source and no output is removed entirely.

`glue(...)` statements (and `from myst_nb import glue`) hand a number to the
prose, which shows it; in the code they are plumbing (the cell policy in
tools/cell_policy.py). Top-level glue statements, and top-level loops whose
body only glues, are dropped from the shown source of each code cell's
input; they still run, and nbval still compares their outputs.

A cell that prints, glues, and prints again has its stream output cut into
several boxes by the (invisible) glue records between them; adjacent boxes
of the same stream in one cell's output are shown as one box, as a reader
running the cell would see it.
"""
import ast
import re

from docutils import nodes

DIRECTIVE_PREFIX = "#|"


def _is_glue(node) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "glue")


def _is_glue_import(node) -> bool:
    return (isinstance(node, ast.ImportFrom) and node.module == "myst_nb"
            and [a.name for a in node.names] == ["glue"])


def drop_glue(source: str) -> str:
    """`source` without its top-level glue statements (a loop whose body
    only glues counts as one); unchanged when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    drop = set()
    for node in tree.body:
        if (_is_glue(node) or _is_glue_import(node)
                or (isinstance(node, ast.For) and not node.orelse
                    and all(_is_glue(b) for b in node.body))):
            drop.update(range(node.lineno, node.end_lineno + 1))
    if not drop:
        return source
    kept = [ln for i, ln in enumerate(source.splitlines(), 1)
            if i not in drop]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept))
    return text.strip("\n")


def _in_cell_input(block) -> bool:
    node = block.parent
    while node is not None:
        if "cell_input" in node.get("classes", []):
            return True
        node = node.parent
    return False


def _strip(doctree):
    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        lines = text.splitlines()
        if not lines:
            continue
        if not lines[0].startswith(DIRECTIVE_PREFIX):
            if _in_cell_input(block):
                new = drop_glue(text)
                if new != text:
                    _replace(block, new)
            continue
        kept = [ln for ln in lines if not ln.startswith(DIRECTIVE_PREFIX)]
        while kept and not kept[0].strip():
            kept.pop(0)
        new = "\n".join(kept)
        if _in_cell_input(block):
            new = drop_glue(new)
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


def _replace(block, new: str) -> None:
    if new.strip():
        block.children = [nodes.Text(new)]
        block.rawsource = new
        return
    cell = block
    while cell.parent is not None and "cell" not in cell.get("classes", []):
        cell = cell.parent
    outputs = [n for n in cell.findall(nodes.container)
               if "cell_output" in n.get("classes", [])]
    if cell.parent is not None and not outputs:
        cell.parent.remove(cell)
    else:
        block.parent.remove(block)


def merge_streams(doctree) -> None:
    """Join adjacent output boxes of the same stream within one cell."""
    for out in list(doctree.findall(nodes.container)):
        if "cell_output" not in out.get("classes", []):
            continue
        kept = []
        for child in list(out.children):
            prev = kept[-1] if kept else None
            if (prev is not None and isinstance(child, nodes.literal_block)
                    and isinstance(prev, nodes.literal_block)
                    and "stream" in child.get("classes", [])
                    and child.get("classes") == prev.get("classes")):
                a, b = prev.astext(), child.astext()
                text = a + ("" if a.endswith("\n") else "\n") + b
                prev.children = [nodes.Text(text)]
                prev.rawsource = text
                out.remove(child)
                continue
            kept.append(child)


def on_doctree_read(app, doctree):
    _strip(doctree)
    merge_streams(doctree)


def setup(app):
    app.connect("doctree-read", on_doctree_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True,
            "version": "1.0"}
