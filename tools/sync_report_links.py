"""Carry re-executed numbers into REPORT.md's links.

    python tools/sync_report_links.py          # rewrite the link texts
    python tools/sync_report_links.py --check  # exit 1 if any is stale

Every `[text](results/report/book_numbers.json#CHAPTER.KEY)` link in REPORT.md
quotes a glued value of the build (`make numbers` collects them). After a
chapter is re-executed, host-timed or record-count values change; this rewrites
a link's text to the current value when both are numbers (a count, a ratio),
and refuses when the text is a word (a verdict such as "passed" or "failed"):
a changed verdict changes the sentence around it, which a person must rewrite.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[([^\]]+)\]\(results/report/book_numbers\.json#([^)]+)\)")
NUMBER = re.compile(r"^[-+]?[\d,.]+(e[-+]?\d+)?%?( of [\d,]+)?$")


def sync(text: str, numbers: dict) -> tuple[str, list[str], list[str]]:
    """(new text, changed links, refused links)."""
    changed, refused = [], []

    def one(m):
        shown, key = m.group(1), m.group(2)
        chapter, _, name = key.partition(".")
        value = numbers.get(chapter, {}).get(name)
        if value is None or value == shown:
            return m.group(0)
        if NUMBER.match(shown) and NUMBER.match(str(value)):
            changed.append(f"{key}: {shown} -> {value}")
            return f"[{value}](results/report/book_numbers.json#{key})"
        refused.append(f"{key}: the text says {shown!r}, the build {value!r}")
        return m.group(0)
    return LINK.sub(one, text), changed, refused


def main(argv: list[str]) -> int:
    path = ROOT / "REPORT.md"
    numbers = json.loads((ROOT / "results" / "report"
                          / "book_numbers.json").read_text())
    new, changed, refused = sync(path.read_text(), numbers)
    for line in changed:
        print("stale" if "--check" in argv else "updated", line)
    for line in refused:
        print("rewrite by hand:", line, file=sys.stderr)
    if "--check" in argv:
        return 1 if changed or refused else 0
    path.write_text(new)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
