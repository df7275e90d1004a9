"""The front-matter page "Six questions, answered" (book/questions.md): six
answers, each with numbers glued from the notebook that measures them."""
import re

import nbformat

from literate_source import Paths

PAGE = Paths.ROOT / "book" / "questions.md"
# myst-nb 1.4 splits a format spec off before the `::`, so a key from another
# notebook needs one (`:s`), or the role reads the key as the spec
ROLE = re.compile(r"\{glue:text\}`([\w.]+)\.ipynb::([^`:]+):s`")


def glued(nb_name: str) -> set[str]:
    nb = nbformat.read(Paths.BOOK / f"{nb_name}.ipynb", as_version=4)
    return {o["metadata"]["scrapbook"]["name"] for c in nb.cells
            if c.cell_type == "code" for o in c.outputs
            if "scrapbook" in o.get("metadata", {})}


def sections(text: str) -> list[str]:
    return re.split(r"^## ", text, flags=re.M)[1:]


def test_six_answers_each_with_a_glued_number():
    parts = sections(PAGE.read_text(encoding="utf-8"))
    assert [p.split(".", 1)[0] for p in parts] == ["1", "2", "3", "4", "5",
                                                   "6"]
    for part in parts:
        assert ROLE.search(part), f"answer {part[:2]} glues no number"
        assert "{ref}`ch-" in part, f"answer {part[:2]} links no chapter"


def test_every_glued_key_exists_in_its_notebook():
    text = PAGE.read_text(encoding="utf-8")
    missing = [f"{nb}::{key}" for nb, key in ROLE.findall(text)
               if key not in glued(nb)]
    assert missing == []
    # a planted key that no notebook glues is caught by the same test
    assert "no_such_key" not in glued("04_attention")


def test_intro_names_the_six_questions_and_toc_has_the_pages():
    intro = (Paths.ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert "{ref}`questions`" in intro
    assert len(re.findall(r"^[1-6]\. ", intro.split("## Six questions")[1]
                          .split("\n## ")[0], flags=re.M)) == 6
    toc = (Paths.ROOT / "_toc.yml").read_text(encoding="utf-8")
    assert "file: book/questions" in toc and "file: book/report" in toc
