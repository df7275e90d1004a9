"""Collect every glued number of the executed chapters into one JSON file.

REPORT.md quotes measurements that the chapters compute live (the bigram
baseline, the attention-scale check, the cost model's crossovers). Each
chapter publishes them with myst_nb's `glue`; the executed notebooks under
book/ store those values. This script reads them back, unchanged, into
results/report/book_numbers.json so that the report can link every number
to a file and tests/test_report.py can check the report against it.

    python tools/book_numbers.py          # rewrite the JSON
    python tools/book_numbers.py --check  # exit 1 if it is stale
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from tool_cli import parser

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "report" / "book_numbers.json"


def glued(notebook: Path) -> dict[str, str]:
    """{glue name: its text/plain value, quotes removed}."""
    nb = json.loads(notebook.read_text())
    found = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if not meta:
                continue
            text = out["data"].get(meta["mime_prefix"] + "text/plain")
            if text is None:
                continue
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                value = text
            found[meta["name"]] = str(value)
    return found


def collect() -> dict:
    return {nb.stem: glued(nb) for nb in sorted((ROOT / "book").glob(
        "*.ipynb")) if glued(nb)}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the JSON is stale")
    args = p.parse_args(argv)
    text = json.dumps(collect(), indent=1, sort_keys=True) + "\n"
    if args.check:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
