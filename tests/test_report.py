"""REPORT.md and the ablations chapter against the JSON they quote.

Every table in REPORT.md marked `<!-- table:NAME -->` must equal what
tools/report_tables.py rebuilds from results/experiments/; every linked
number `[x](results/FILE#key.path)` must equal the value at that key (with
`*factor` for a unit change, rounded to the digits quoted); a number linked
to `results/experiments/ID/#table-NAME` must appear in that table; and no
decimal number may appear in the prose without such a link. The chapter's
rendered tables must equal the summaries of the committed JSON."""
import json
import re
from pathlib import Path

import pytest

import report_tables  # tools/ is on the path (conftest.py)
from transformer.experiments import (EXPERIMENTS, TABLE_METRICS, load_runs,
                                     summary_table)

ROOT = Path(__file__).resolve().parents[1]
REPORT = (ROOT / "REPORT.md").read_text()
LINK = re.compile(r"\[([^\]]+)\]\((results/[^)#\s]*)(?:#([^)\s]+))?\)")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?:e[-+]?\d+)?(?![\w.])")


def _tables(text):
    """{name: table text} for each `<!-- table:NAME -->` marker."""
    out = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.fullmatch(r"<!-- table:(\S+) -->", line.strip())
        if m:
            body = []
            for row in lines[i + 1:]:
                if not row.startswith("|"):
                    break
                body.append(row)
            out[m.group(1)] = "\n".join(body)
    return out


def _resolve(obj, frag):
    if isinstance(obj, list):
        head, _, rest = frag.partition(".")
        return _resolve(obj[int(head)], rest) if rest else obj[int(head)]
    if frag in obj:
        return obj[frag]
    for key in sorted(obj, key=len, reverse=True):
        if frag.startswith(key + "."):
            return _resolve(obj[key], frag[len(key) + 1:])
    raise KeyError(frag)


def _check_link(text, path, frag):
    if path.startswith("results/experiments/") and frag and \
            frag.startswith("table-"):
        table = report_tables.TABLES[frag[len("table-"):]]()
        assert text in table, (text, frag)
        return
    assert frag, f"{text}: a linked number needs #key, got {path}"
    factor = 1.0
    if "*" in frag:
        frag, f = frag.split("*")
        factor = float(f)
    value = _resolve(json.loads((ROOT / path).read_text()), frag)
    if isinstance(value, str):
        assert text == value or text.rstrip("%") == value.rstrip("%"), \
            (text, value, frag)
        return
    shown = text.replace(",", "")
    digits = len(shown.split(".")[1]) if "." in shown else 0
    assert f"{value * factor:.{digits}f}" == shown, (text, value, frag)


def test_report_sections():
    assert "## 9. What I Expected And Did Not Get" in REPORT
    body = REPORT.split("What I Expected And Did Not Get", 1)[1]
    body = body.split("\n## ", 1)[0]
    assert len(body.split()) > 100
    assert "contradicted" in body or "failed" in body


def test_report_tables_match_json():
    tables = _tables(REPORT)
    assert {"E4", "E6", "E6-init"} <= set(tables)
    for name, text in tables.items():
        assert text == report_tables.TABLES[name](), name


def test_report_linked_numbers_match_json():
    links = LINK.findall(REPORT)
    numeric = [(t, p, f) for t, p, f in links
               if re.fullmatch(r"[-+]?[\d.,]+(?:e[-+]?\d+)?%?", t)]
    assert len(numeric) >= 40
    for text, path, frag in numeric:
        assert (ROOT / path).exists(), path
        _check_link(text, path, frag)


def test_no_unlinked_decimals():
    prose = LINK.sub("", REPORT)
    prose = re.sub(r"\$[^$]*\$", "", prose)  # constants inside math
    prose = "\n".join(line for line in prose.splitlines()
                      if not line.startswith("|"))  # checked tables
    declared = set()
    for exp in EXPERIMENTS.values():  # grids and probes
        declared |= set(DECIMAL.findall(exp.prediction + exp.falsifier))
    stray = [x for x in DECIMAL.findall(prose) if x not in declared]
    assert not stray, f"decimals without a link to their JSON: {stray}"


def test_report_length():
    """2,000-3,000 words of prose (tables and link targets not counted)."""
    text = re.sub(r"\(results/[^)]*\)", "", REPORT)
    prose = [line for line in text.splitlines() if not line.startswith("|")]
    words = len(" ".join(prose).split())
    assert 2000 <= words <= 3000, words


def test_chapter_tables_match_json():
    nb = json.loads((ROOT / "book" / "15_ablations.ipynb").read_text())
    shown = ["".join(o["data"]["text/markdown"])
             for c in nb["cells"] for o in c.get("outputs", [])
             if "text/markdown" in o.get("data", {})]
    root = ROOT / "results" / "experiments"
    for exp_id in ("E4", "E6", "E14", "E2", "E3", "E5", "E7", "E8", "E1",
                   "E9", "E10", "E11", "E12", "E13"):
        exp = EXPERIMENTS[exp_id]
        want = summary_table(exp, load_runs(exp_id, root),
                             TABLE_METRICS[exp_id])
        assert want in shown, exp_id


def test_book_numbers_fresh():
    """results/report/book_numbers.json equals what the executed notebooks
    hold now (run `make numbers` after re-executing)."""
    import book_numbers
    assert book_numbers.main(["--check"]) == 0
