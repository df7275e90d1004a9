"""Measure the rendered book as a reader meets it: headless Chromium on `_build/html`.

    python tools/page_metrics.py [--html _build/html] [--out results/report/page_metrics.json]
        [--only PAGE ...] [--shots DIR]   # DIR/<page>.png: the top of each page

For every page of the build (front matter, chapters, appendices) it loads the
page in a 1280 px wide window, waits for MathJax, and reads from the DOM:

- `height_px`: the page's scroll height;
- `code_cells_shown`, `code_lines_shown`: code inputs a reader sees without
  opening anything (non-blank lines; a `hide-input` cell is folded, so it is
  counted in `code_cells_folded` instead, and a removed cell is not in the page);
- `split_output_cells`, `max_output_boxes`: cells whose text output is more
  than one box (a print loop in a stream that was interrupted, a table header
  apart from its rows; a figure is not counted, so a figure with the numbers
  printed under it is not a split);
- `overflow_blocks`: code, output or table blocks wider than their column
  (scrolling sideways); `overflow_where` lists each as [tag, px beyond the
  column, its first line], and `split_where` each split cell as [boxes, the
  first line of its code];
- `figures`, `figures_captioned`: images in the page and those inside a
  numbered figure with a caption;
- `raw_dollar_nodes`: prose text (outside code and typeset math) that still
  holds a `$`, i.e. LaTeX that did not render;
- `first_experiment_px`: how far down the first experiment's section (a
  `sec-eN` label, chapter 15's E4) starts, or -1.

Needs `chromium` (Debian: `apt-get install chromium`). The page is measured on
a temporary copy with one injected script; the build itself is not changed.
Totals are given for chapters 01-16, for those plus every appendix numbered
9N (the material the reader review measured: its infrastructure sections have
since moved from the chapters into appendices 92-97), and for every page.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tool_cli import add_out, parser

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1280

SCRIPT = r"""
<script>
(function () {
  function visible(el) {  // a closed <details> (a folded cell) hides its content
    return el.getClientRects().length > 0 &&
           !el.closest('details:not([open])');
  }
  function measure() {
    try { measureOrThrow(); } catch (e) {
      const pre = document.createElement('div');
      pre.id = 'page-metrics-json';
      pre.textContent = JSON.stringify({error: String(e)});
      document.body.appendChild(pre);
    }
  }
  function measureOrThrow() {
    const art = document.querySelector('article') || document.body;
    const m = {height_px: Math.max(document.documentElement.scrollHeight,
                                   document.body.scrollHeight)};
    let cells = 0, lines = 0, folded = 0;
    document.querySelectorAll('div.cell').forEach(function (cell) {
      const inp = cell.querySelector('div.cell_input');
      if (!inp) return;
      if (!visible(inp)) { folded += 1; return; }
      cells += 1;
      const pre = inp.querySelector('pre');
      if (pre) lines += pre.innerText.split('\n').filter(
          function (l) { return l.trim().length > 0; }).length;
    });
    m.code_cells_shown = cells; m.code_lines_shown = lines;
    m.code_cells_folded = folded;
    let split = 0, maxBoxes = 0;
    const splitWhere = [];
    document.querySelectorAll('div.cell_output').forEach(function (out) {
      // text boxes only: a figure beside the numbers printed under it is
      // two outputs by design, not one print cut in pieces. A markdown
      // output is rendered as bare nodes (paragraphs, tables), not in a
      // div.output: a run of such nodes is one box.
      let boxes = 0, inMarkdown = false;
      Array.from(out.children).forEach(function (c) {
        if (!visible(c) || c.querySelector('img') || c.tagName === 'IMG') {
          inMarkdown = false; return; }
        if (c.classList.contains('output')) { boxes += 1; inMarkdown = false; }
        else if (!inMarkdown) { boxes += 1; inMarkdown = true; }
      });
      if (boxes > 1) {
        split += 1;
        const cell = out.closest('div.cell');
        const pre = cell && cell.querySelector('div.cell_input pre');
        splitWhere.push([boxes, pre ?
            pre.textContent.split('\n')[0].slice(0, 70) : '']);
      }
      maxBoxes = Math.max(maxBoxes, boxes);
    });
    m.split_output_cells = split; m.max_output_boxes = maxBoxes;
    m.split_where = splitWhere;
    let over = 0;
    const overWhere = [];
    art.querySelectorAll('pre, table').forEach(function (b) {
      if (!visible(b)) return;
      const box = b.tagName === 'TABLE' ? (b.parentElement || b) : b;
      if (b.scrollWidth > box.clientWidth + 2) {
        over += 1;
        // [tag, px beyond the column, the block's first line]
        overWhere.push([b.tagName.toLowerCase(),
                        b.scrollWidth - box.clientWidth,
                        b.textContent.trim().split('\n')[0].slice(0, 70)]);
      }
    });
    m.overflow_blocks = over; m.overflow_where = overWhere;
    const imgs = Array.from(art.querySelectorAll('img'));
    m.figures = imgs.length;
    m.figures_captioned = imgs.filter(function (i) {
      const f = i.closest('figure');
      return f && f.querySelector('figcaption');
    }).length;
    let dollars = 0;
    const walker = document.createTreeWalker(art, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const n = walker.currentNode;
      if (n.nodeValue.indexOf('$') < 0) continue;
      if (n.parentElement.closest('pre, code, script, mjx-container, .math'))
        continue;
      dollars += 1;
    }
    m.raw_dollar_nodes = dollars;
    // where the first experiment's section starts (a label `sec-eN`, no
    // suffix: `sec-e15-probe` is the runner's), or -1
    const firstExp = Array.from(document.querySelectorAll('[id]')).find(
        function (e) { return /^sec-e\d+$/.test(e.id); });
    m.first_experiment_px = firstExp ? Math.round(
        firstExp.getBoundingClientRect().top + window.scrollY) : -1;
    // the ten tallest outputs: [px, first line of the cell's code]
    m.tallest_outputs = Array.from(document.querySelectorAll(
        'div.cell_output')).filter(visible).map(function (o) {
      const cell = o.closest('div.cell');
      const pre = cell && cell.querySelector('div.cell_input pre');
      return [Math.round(o.getBoundingClientRect().height),
              pre ? pre.textContent.split('\n')[0].slice(0, 70) : ''];
    }).sort(function (a, b) { return b[0] - a[0]; }).slice(0, 10);
    // where each section starts: [title, px] of every h2, in page order
    m.sections = Array.from(art.querySelectorAll('h2')).map(function (h) {
      return [h.innerText.replace(/#$/, '').trim(), Math.round(
          h.getBoundingClientRect().top + window.scrollY)]; });
    const pre = document.createElement('div');
    pre.id = 'page-metrics-json';
    pre.textContent = JSON.stringify(m);
    document.body.appendChild(pre);
  }
  window.addEventListener('load', function () {
    const mj = window.MathJax && window.MathJax.startup &&
               window.MathJax.startup.promise;
    if (mj) { mj.then(function () { setTimeout(measure, 200); }); }
    else { measure(); }
  });
})();
</script>
"""

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str:
    for name in BROWSERS:
        if shutil.which(name):
            return shutil.which(name)
    raise SystemExit("page_metrics: no headless Chromium found "
                     "(apt-get install chromium)")


def chromium(exe: str, page: Path, height: int, action: str, **kw):
    """Headless Chromium on `page` in a WIDTH x `height` window, with one
    action (`--dump-dom`, `--screenshot=...`)."""
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu",
         f"--window-size={WIDTH},{height}", "--hide-scrollbars",
         "--virtual-time-budget=15000", action, page.as_uri()],
        capture_output=True, timeout=180, **kw)


def measure_page(page: Path, exe: str) -> dict:
    html = page.read_text(encoding="utf-8")
    probe = page.with_name(f".metrics_{page.name}")
    probe.write_text(html.replace("</body>", SCRIPT + "</body>", 1),
                     encoding="utf-8")
    try:
        # the measuring pre is appended last; the window's height only sets
        # the viewport, the scroll height is the page's own
        out = chromium(exe, probe, 1000, "--dump-dom", text=True).stdout
    finally:
        probe.unlink()
    found = re.search(r"<div id=\"page-metrics-json\"[^>]*>(.*?)</div>",
                      out, re.S)
    if not found:
        raise RuntimeError(f"{page}: the measuring script did not report")
    text = (found.group(1).replace("&quot;", '"').replace("&lt;", "<")
            .replace("&gt;", ">").replace("&amp;", "&"))
    data = json.loads(text)
    if "error" in data:
        raise RuntimeError(f"{page}: {data['error']}")
    return data


def screenshot(page: Path, exe: str, out: Path, height: int = 2400) -> None:
    """The top `height` px of `page` at the measuring width, as a PNG."""
    chromium(exe, page, height, f"--screenshot={out}", check=True)


def pages(html: Path) -> list[Path]:
    return sorted((html / "book").glob("*.html"))


def totals(per: dict[str, dict], names) -> dict:
    keys = ("height_px", "code_cells_shown", "code_lines_shown",
            "code_cells_folded", "split_output_cells", "overflow_blocks",
            "figures", "figures_captioned", "raw_dollar_nodes")
    chosen = [per[n] for n in names]
    out = {k: sum(p[k] for p in chosen) for k in keys}
    out["pages"] = len(chosen)
    lines = [p["code_lines_shown"] for p in chosen]
    out["code_lines_shown_max"] = max(lines) if lines else 0
    out["code_lines_shown_mean"] = round(sum(lines) / len(lines), 1) \
        if lines else 0.0
    return out


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--html", default=str(ROOT / "_build" / "html"))
    add_out(ap, str(ROOT / "results" / "report" / "page_metrics.json"))
    ap.add_argument("--label", default="", help="what build this is")
    ap.add_argument("--only", nargs="*", default=None,
                    help="measure only these pages (stems), print sections")
    ap.add_argument("--shots", default=None, metavar="DIR",
                    help="also write the top of each measured page as "
                         "DIR/<page>.png")
    args = ap.parse_args(argv)
    html = Path(args.html).resolve()
    if not (html / "book").is_dir():
        print(f"page_metrics: no built book under {html}", file=sys.stderr)
        return 2
    exe = browser()
    per = {}
    for page in pages(html):
        if args.only is not None and page.stem not in args.only:
            continue
        per[page.stem] = measure_page(page, exe)
        if args.shots:
            Path(args.shots).mkdir(parents=True, exist_ok=True)
            screenshot(page, exe, Path(args.shots).resolve() /
                       f"{page.stem}.png")
        if args.only is not None:
            for title, px in per[page.stem]["sections"]:
                print(f"    {px:>8,} px  {title}")
            for px, first in per[page.stem]["tallest_outputs"]:
                print(f"    output {px:>6,} px  {first}")
            for tag, px, first in per[page.stem]["overflow_where"]:
                print(f"    too wide {tag:5s} +{px:>4} px  {first}")
            for boxes, first in per[page.stem]["split_where"]:
                print(f"    split into {boxes} boxes  {first}")
        print(f"{page.stem:20s} {per[page.stem]['height_px']:>8,} px "
              f"{per[page.stem]['code_lines_shown']:>6} code lines")
    numbered = [n for n in per if re.fullmatch(r"(0[1-9]|1[0-6])_.*", n)]
    appendix = [n for n in per if re.fullmatch(r"9\d_.*", n)]
    result = {
        "label": args.label,
        "window_width_px": WIDTH,
        "pages": per,
        "totals": {
            "chapters_01_16": totals(per, numbered),
            "chapters_and_appendices": totals(per, numbered + appendix),
            "all_pages": totals(per, list(per)),
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    t = result["totals"]
    print(f"chapters 01-16: {t['chapters_01_16']['height_px']:,} px, "
          f"{t['chapters_01_16']['code_lines_shown']:,} code lines shown "
          f"(max {t['chapters_01_16']['code_lines_shown_max']}, mean "
          f"{t['chapters_01_16']['code_lines_shown_mean']}); wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
