"""Chapter numbers agree everywhere: file names, rendered headings, prose.

Jupyter Book numbers the chapters of numbered parts consecutively across
parts, in _toc.yml order; so the rendered number of a chapter equals its
file number exactly when the numbered entries are the chapter files in
order 1, 2, 3, ... with nothing else among them. A typed "chapter N" in the
README, the REPORT, a chapter, a front-matter page or a docstring must name a
chapter that exists."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MENTION = re.compile(r"\b[Cc]hapters? (\d+)((?:(?:, | and | to |-)\d+)*)")


def numbered_entries(toc: dict) -> list[str]:
    return [c["file"] for part in toc["parts"] if part.get("numbered")
            for c in part["chapters"]]


def numbering_problems(toc: dict) -> list[str]:
    problems = []
    for i, f in enumerate(numbered_entries(toc), start=1):
        m = re.fullmatch(r"book/(\d\d)_\w+", f)
        if not m:
            problems.append(f"{f} is numbered {i} but is not a chapter file")
        elif int(m.group(1)) != i:
            problems.append(f"{f} renders as chapter {i}")
    return problems


def chapter_numbers() -> set[int]:
    return {int(p.name[:2]) for p in (ROOT / "chapters").glob("[0-8]?_*.md")}


def mention_problems(text: str, where: str, known: set[int]) -> list[str]:
    out = []
    for m in MENTION.finditer(text):
        nums = [int(m.group(1))] + [int(n) for n in
                                    re.findall(r"\d+", m.group(2))]
        out += [f"{where}: '{m.group(0)}' names no chapter {n}"
                for n in nums if n not in known]
    return out


def test_rendered_numbers_equal_file_numbers():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    assert not numbering_problems(toc)
    listed = {int(Path(f).name[:2]) for f in numbered_entries(toc)}
    assert listed == chapter_numbers()  # every chapter is numbered


def test_typed_chapter_numbers_name_existing_chapters():
    known = chapter_numbers()
    files = [ROOT / "README.md", ROOT / "REPORT.md",
             *sorted((ROOT / "chapters").glob("*.md")),
             *sorted((ROOT / "book").glob("*.md")),
             *sorted((ROOT / "transformer").glob("*.py")),
             *sorted((ROOT / "tools").glob("*.py"))]
    problems = []
    for f in files:
        problems += mention_problems(f.read_text(), f.name, known)
    assert not problems, "\n".join(problems)


def test_checks_fail_on_planted_errors():
    bad_toc = {"parts": [
        {"numbered": True, "chapters": [{"file": "book/01_softmax"},
                                        {"file": "book/part_model"},
                                        {"file": "book/04_attention"}]}]}
    assert numbering_problems(bad_toc) == [
        "book/part_model is numbered 2 but is not a chapter file",
        "book/04_attention renders as chapter 3"]
    assert mention_problems("see chapters 6 and 17", "x", {6}) == [
        "x: 'chapters 6 and 17' names no chapter 17"]
