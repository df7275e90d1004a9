"""book/report.md is REPORT.md rendered by tools/report_page.py, and fresh."""
import report_page  # tools/, put on sys.path by the root conftest.py


def test_report_page_is_fresh():
    assert report_page.PAGE.read_text(encoding="utf-8") == report_page.render(
        report_page.SOURCE.read_text(encoding="utf-8")), \
        "book/report.md is stale: run `python tools/report_page.py`"


def test_result_links_keep_their_text_and_lose_their_target():
    page = report_page.render(
        "# R\n\nat [12,288](results/report/book_numbers.json#04.cq1) and "
        "[the E4 runs](results/experiments/E4/), see [ch](book/x.md)\n")
    assert "at 12,288 and the E4 runs, see [ch](book/x.md)" in page
    assert "](results/" not in page
    assert page.index("(report)=") < page.index("# R")
