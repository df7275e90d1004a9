"""Render REPORT.md as a page of the book: book/report.md.

    python tools/report_page.py          # write book/report.md
    python tools/report_page.py --check  # exit 1 if it is stale

REPORT.md lives at the repository root, where its numbers link to the
result files they came from (`results/...`). Those files are not pages of the
book, so on the page each such link keeps its text and loses its target; a
note under the title says where the linked version is. Everything else is
copied as it is. tests/test_report_page.py fails when the page is stale.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "REPORT.md"
PAGE = ROOT / "book" / "report.md"
RESULT_LINK = re.compile(r"\[([^\]]+)\]\((?:\.\./)?results/[^)\s]*\)")

NOTE = ("```{note}\nThis page is REPORT.md, rendered by `tools/report_page.py`."
        " In the repository every number in it links to the result file it "
        "came from (under `results/`); here the numbers are shown without "
        "those links. The six central questions have their own page, "
        "{ref}`questions`.\n```\n")


def render(text: str) -> str:
    body = RESULT_LINK.sub(r"\1", text)
    lines = body.split("\n")
    head = next(i for i, ln in enumerate(lines) if ln.startswith("# "))
    out = ["<!-- generated from REPORT.md by tools/report_page.py: "
           "do not edit -->", "(report)=", *lines[:head + 1], "", NOTE,
           *lines[head + 1:]]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    want = render(SOURCE.read_text(encoding="utf-8"))
    if "--check" in argv:
        ok = PAGE.exists() and PAGE.read_text(encoding="utf-8") == want
        print("book/report.md is fresh" if ok else
              "book/report.md is stale: run tools/report_page.py")
        return 0 if ok else 1
    PAGE.write_text(want, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
