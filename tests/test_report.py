"""REPORT.md and the ablations chapter against the JSON they quote.

Link syntax (what REPORT.md must use)
-------------------------------------
Every number in the report's prose is a markdown link to its source, and
the link's text must equal the source's value exactly, sign included:

* A JSON value:

      [4.004](results/report/book_numbers.json#07_bigram.bg_bigram_val)

  The fragment is a dotted key path (list items by index,
  `#runs.3.ratio_ours_over_hf.0`; keys that contain dots, such as
  `bg_lr0.5_val_ok`, are found whole). A string value (every glued
  number in results/report/book_numbers.json is one) must equal the text
  character for character. A numeric value is formatted with as many
  decimals as the text shows (and thousands separators if the text has
  them) and must then equal it; `*FACTOR` rescales first, for a unit
  change: `#summary.p50*1e6` shows seconds in microseconds.
* One cell of a table that the report prints under `<!-- table:NAME -->`
  (and which must itself equal what tools/report_tables.py rebuilds):

      [5.142](results/experiments/E3/#table-E3/row=8/col=val_loss/part=mean)

  `row=` names the row by its leading cells' slugs, joined by commas when
  one cell is not unique (`row=0.01,15` in E7's table), and must match
  exactly one row; `col=` is the slug of the column header. A slug is the
  text lowercased, its runs of `[a-z0-9_.+-]` joined by `-`: "loss at
  T = 64" is `loss-at-t-64`, "pre / post, last block" is
  `pre-post-last-block`. `part=mean|lo|hi` picks one number of a
  `mean [lo, hi]` cell and is required for such a cell and refused for
  any other. A trailing `/neg` flips the cell's sign before comparing, for
  prose that states a magnitude: "lost by [0.266](...#table-E4/row=learned/
  col=none-minus-this-paired/part=mean/neg)" where the cell reads -0.266.
  The path must be `results/experiments/ID/` with ID the table's
  experiment.

Numbers that need no link: single-digit integers, and the occurrences
that RULES (regexes, each with its reason) or ALLOW (one entry per
occurrence: a snippet of the report that occurs exactly once, and why its
number is not a measurement) cover. Checked: decimals, integers of two or
more digits or with separators, percentages, ratios (`1.3x`, `16x`,
`3 times`) and number words (`twice`, `half`, `a third`, `tenfold`,
`fiftyfold`, `sixteen`, `three times`), inside math too. A stale ALLOW
entry (matching no number, or not exactly once) is itself a failure.
Lines of a marked table are not prose: the table test checks them.

`tests/test_report.py::test_report_numbers` lists every problem at once.
The checker is exercised on a small synthetic report (FIXTURE) as well as
on REPORT.md, and planted errors (a wrong cell, a flipped sign, an
unlinked "fiftyfold" or "16x") must each be reported.

Claims the values cannot check (test_report_semantics): a verdict or
direction word in prose (held, failed, inconclusive, caught, missed,
better, worse, fell behind, kept up, trailed, beat, cleared, neither; a
linked verdict is exempt) and a count of seeds ("three seeds") must lie
inside a CLAIMS snippet, whose check reads the records (or whose reason
says why it is no measurement); a link whose value a sibling key (one
`_`-separated part different) also holds must name its own part nearer
than the sibling's ("16" for abl_e6_lf_post_16); no placeholder
(POSTNORM-EXPECTED, E15-TODO, TODO, FIXME, TBD, XXX). A new verdict word in
the report therefore needs a link or a CLAIMS entry. `REPORT_MD=path`, or
`python tests/test_report.py path`, checks another copy of the report.

Other checks: every marked table equals tools/report_tables.py's rebuild
from results/experiments/; the chapter's rendered tables equal the
summaries of the committed JSON; results/report/book_numbers.json is
fresh."""
import functools
import json
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import report_tables  # noqa: E402 (tools/, as conftest.py puts it)
from transformer.ablations import EXPERIMENTS  # noqa: E402
from transformer.experiments import load_runs, summary_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# REPORT_MD=path checks another copy of the report against this tree's JSON
REPORT_PATH = Path(os.environ.get("REPORT_MD") or ROOT / "REPORT.md")
REPORT = REPORT_PATH.read_text()

LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
MARKER = re.compile(r"<!-- table:(\S+) -->")
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?")
INTERVAL = re.compile(r"(\S+) \[(\S+), (\S+)\]")

_UNITS = ("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
          "thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|"
          "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|"
          "thousand|million|billion|dozen")
_BIG = ("ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|"
        "eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|"
        "ninety|hundreds?|thousands?|millions?|billions?|dozens?")
# Every token that states a quantity. Digits: a decimal, an integer of two
# or more digits or with separators, a percentage, a ratio ("1.3x", "16x",
# "2 times"). Words: multiples and fractions, "-fold", "N times", numbers
# of ten and more.
QUANTITY = re.compile(
    r"(?<![\w.])(?=[-+\d])(?:"
    r"[-+]?\d+(?:\.\d+)?\s*(?:x|×|times)(?!\w)"         # 1.3x, 16x, 2 times
    r"|[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?\s*%"             # 30%, 0.5 %
    r"|[-+]?\d+\.\d+(?:e[-+]?\d+)?"                      # 0.047, 1.2e-3
    r"|[-+]?\d+e[-+]?\d+"                                # 6e-07
    r"|[-+]?\d{1,3}(?:,\d{3})+"                          # 204,800
    r"|[-+]?\d{2,}"                                      # 16, 2048
    r")(?![\w])"
    r"|\b(?=[a-zA-Z])(?i:(?:twice|thrice|half|halves|halved|"
    r"double[ds]?|doubling|"
    r"triple[ds]?|quadruple[ds]?|"
    rf"(?:{_UNITS})[- ]?fold|"
    rf"(?:{_UNITS}|a|an)\s+(?:times|thirds?|quarters?|fifths?|tenths?|"
    r"hundredths?)|"
    r"thirds?|quarters?|fifths?|tenths?|"
    rf"{_BIG})\b)")

# Regexes whose matches may hold numbers that are not measurements. Each
# says why; a number inside any match needs no link.
RULES = [
    # Section numbers in headings: "## 9. What I Expected".
    (re.compile(r"(?m)^#{1,6} \d+\."), "a section number"),
    # Cross-references: "chapter 16", "sections 6 and 7", "E10 to E13".
    (re.compile(r"\b(?:[Cc]hapters?|[Ss]ections?)\s+\d+"
                r"(?:(?:,\s*|\s+and\s+|\s+to\s+)\d+)*"),
     "a chapter or section number"),
    # A setting defined in math, "$T = 64$", "$d_k = 256$", "$D = 128$":
    # the value is the definition, not a result.
    (re.compile(r"(?<![\w\\])[A-Za-z](?:_\{?\w+\}?)?\s*=\s*\d[\d,]*\$"),
     "a defined setting"),
    # The sentence that states a declared prediction or falsifier quotes
    # its thresholds (written before the run, in transformer/experiments);
    # the sentence runs to a full stop that no digit follows.
    (re.compile(r"(?:Prediction|Falsifier)(?:, declared before the runs)?:"
                r"(?:[^.]|\.(?=\d))*\."),
     "a declared threshold of a prediction"),
    # The confidence level of an interval: "95% interval", "95% $t$
    # intervals", "95% bootstrap interval".
    (re.compile(r"\b95%\s+(?:\$t\$\s+|bootstrap\s+)?intervals?\b"),
     "a confidence level"),
    # Token positions that name a window's parts: "positions 64 to 127",
    # "positions 0 to 63", "position 64".
    (re.compile(r"\bpositions?\s+\d+(?:\s+to\s+\d+)?"),
     "a position index"),
    # Model and format names that carry digits: "GPT-2", "float32".
    (re.compile(r"\bGPT-2\b|\bfloat(?:16|32|64)\b"), "a name"),
    # Dates from the commit history, "2026-12-01", and commit hashes in
    # backticks, "`1725222`": where a ledger entry comes from.
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "a date"),
    (re.compile(r"`[0-9a-f]{7,40}`"), "a commit hash"),
]

# One entry per occurrence: (snippet, reason). The snippet must occur in
# the report exactly once and contain a number this test would flag.
ALLOW = [  # settings, thresholds and definitions the report states
    ("contexts of 64 to 1024 positions",
     "the roofline benchmark's declared context lengths, a setting"),
    ('the target, at most one and a half times the',
     'the decode target (1.5 times the floor) the book set itself'),
    ('At twice the trained length every arm',
     '2T, the setting E4 measures at'),
    ('The ten correctness properties',
     'the count of properties the brief defines, each a test'),
    ('$128 \\times 128$ matrix product',
     "the benchmark's shape, a setting"),
    ("512-token run's median step takes",
     "E11's declared run lengths"),
    ('quadratic part passes half at $6D$ tokens',
     'the crossover definition (half the FLOPs)'),
    ("quadratic part takes half the block's time",
     'the crossover definition (half the time)'),
    ('as bytes (a vocabulary of the 256 bytes and one end-of-text',
     'a declared setting of a model, budget or task, not a measurement'),
    ("E4's five arms retrained at 400, 800 and", 'a declared setting of a model, budget or task, not a measurement'),
    ('1,600 steps, three seeds each, finish', 'a declared setting of a model, budget or task, not a measurement'),
    ('e30_gap_400_m) nats at 400 steps', 'a declared setting of a model, budget or task, not a measurement'),
    ('e30_gap_1600_m) at 1,600. The', 'a declared setting of a model, budget or task, not a measurement'),
    ('byte n-gram at 1,600 steps |', 'a declared setting of a model, budget or task, not a measurement'),
    ("and at 800 steps at [", "E40's declared second budget"),
    ("failure depth the same at 400, 800 and 1,600 steps, the placements' "
     "ranking kept (rank correlation at least 0.8)",
     "E40's declared budgets and its declared threshold (the prediction)"),
    ("the bigram draft's acceptance below 0.25",
     "E33's declared threshold (the prediction)"),
    ("FLOP share at every context from 256 tokens",
     "chapter 10's declared range of the prediction"),
    ('so that sixteen blocks fit the budget; E3 run',
     'a declared setting in words (budget, arms, depth), not a measurement'),
    ('locks fit the budget; E3 runs twice the budget (section 5).',
     'a declared setting in words (budget, arms, depth), not a measurement'),
    ('vocabulary of 1,024, 4 layers, width 128,',
     'a declared setting of a model, budget or task, not a measurement'),
    ('ary of 1,024, 4 layers, width 128,',
     'a declared setting of a model, budget or task, not a measurement'),
    ('table, RoPE, and sinusoids twice: added as they are, about',
     'a declared setting in words (budget, arms, depth), not a measurement'),
    ('on windows of twice the trained length, unseen positions against',
     'a declared setting in words (budget, arms, depth), not a measurement'),
    ('tion and almost no token, and 400 steps never',
     'a declared setting of a model, budget or task, not a measurement'),
    ('the three encodings within 0.05 nats of each other; that',
     'a threshold stated in a declared prediction or bar'),
    ('4 (E14: three learning rates, 20',
     'a declared setting of a model, budget or task, not a measurement'),
    ('or 200 warm-up steps, two seeds).',
     'a declared setting of a model, budget or task, not a measurement'),
    ('With 20 warm-up steps post-norm at $10^{-3}$ and above',
     "E14's declared warm-up and learning rates, settings"),
    ('nats; with 200 it trained', "E14's declared warm-up, a setting"),
    ('nats at $3 \\times 10^{-3}$), but the best pair',
     'a power of ten in a learning rate setting'),
    ('cements at depths 2, 4, 8 and 16, three seeds each, pre-norm',
     'a declared setting of a model, budget or task, not a measurement'),
    ('the smallest effect of interest $\\delta$ (0.02 nats',
     "the decided reruns' declared delta (ablations.DELTA), a setting"),
    ('at a peak rate of $10^{-2}$ warm-up minus none',
     'a power of ten in a learning rate setting'),
    ('nats; at $10^{-3}$ no warm-up minus warm-up',
     'a power of ten in a learning rate setting'),
    ('block by block. E10 overfits 200 tokens below 0.1 nats for eve',
     'a declared setting of a model, budget or task, not a measurement'),
    ('E10 overfits 200 tokens below 0.1 nats for every seed (worst',
     'a threshold stated in a declared prediction or bar'),
    ('the `tiny` model, $V = 1024$, 200 steps) did not catch the bug',
     'a declared setting of a model, budget or task, not a measurement'),
    ('runner.pr_e11_cached) times a 32-token',
     'a declared setting of a model, budget or task, not a measurement'),
    ('over 4,096 slots. Measured (E15b: multi-',
     'a declared setting of a model, budget or task, not a measurement'),
    ('DeepNorm at depths 2 to\n16;', "E19's declared depths, a setting"),
    ('reaching below a half;', "E21's declared factor's lower end, quoted"),
    (') at depth 16 ([', "stage 2's declared depth, a setting"),
    ("From depth 2 to 16 the last block's gradient after ten steps",
     "E21's declared depths and step, settings"),
    ('twelve at depth 16, and its best cells all sit at the longest warm-up',
     "E19's twelve cells per depth, a setting"),
    ('ends within 0.05 nats of the unigram at every depth |',
     "E28's declared margin, quoted from its prediction"),
    ('E28 (2026-12-03): at lr $10^{-1}$ at',
     "E28's declared learning rate, a setting"),
    ('costs at least double what two heads cost |',
     "the conversion's predicted factor, quoted from chapter 17"),
    ('when the 400\nsteps ended', "E6's declared budget, a setting"),
    ('a longer run at 256 is a diagnostic',
     "E15b's declared sequence length, a setting"),
    ("pre- and post-norm's at depth 16 |", "E19's declared depth, a setting"),
    ("-sensitive placement at depth 16 |", "E19's declared depth, a setting"),
    ('for a batch of 64 (E12 measures the bytes, sect',
     'a declared setting of a model, budget or task, not a measurement'),
    ('(1,024-token BPE, 2026-11-30)',
     "the first version's vocabulary, a setting"),
    ('rerun\'s "within 0.05 nats"', "E4's declared threshold, quoted"),
    ('2,048 "no better than 1,024"', "E9's first prediction, quoted"),
    ('declared again at twice the budget |',
     'a declared setting in words (budget, arms, depth), not a measurement'),
    ('within 0.05 nats of the counted one at learning rate 0.5',
     "E18's declared threshold and setting"),
    ('within 0.05 nats at depths 2 and 4, a failure depth at 8 or 16',
     "E6's declared prediction"),
    ('window MLP by more than 0.3 |', "E15's declared threshold"),
]


class Problems(list):
    def add(self, msg):
        self.append(msg)


def slug(text):
    return "-".join(re.findall(r"[a-z0-9_.+\-]+", text.lower()))


def marked_tables(text):
    """{name: (first line index, last line index + 1, [table lines])}."""
    out = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = MARKER.fullmatch(line.strip())
        if m:
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out[m.group(1)] = (i, j, lines[i + 1:j])
    return out


def _cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def table_cell(tables, name, spec):
    """The text of one cell: spec is the fragment after `table-NAME/`."""
    if name not in tables:
        raise LookupError(f"no table marked <!-- table:{name} --> here")
    lines = tables[name][2]
    head = [slug(c) for c in _cells(lines[0])]
    rows = [_cells(r) for r in lines[2:]]
    opts, neg = {}, False
    for seg in spec.split("/"):
        if seg == "neg":
            neg = True
        elif "=" in seg and seg.split("=")[0] in ("row", "col", "part"):
            k, v = seg.split("=", 1)
            opts[k] = v
        else:
            raise LookupError(f"unknown segment {seg!r}")
    if "row" not in opts or "col" not in opts:
        raise LookupError("a table link needs row= and col=")
    if head.count(opts["col"]) != 1:
        raise LookupError(f"col={opts['col']} is not one of {head}")
    key = opts["row"].split(",")
    hits = [r for r in rows if [slug(c) for c in r[:len(key)]] == key]
    if len(hits) != 1:
        raise LookupError(f"row={opts['row']} matches {len(hits)} rows")
    cell = hits[0][head.index(opts["col"])]
    m = INTERVAL.fullmatch(cell)
    part = opts.get("part")
    if m and part not in ("mean", "lo", "hi"):
        raise LookupError(f"cell {cell!r} needs part=mean|lo|hi")
    if not m and part is not None:
        raise LookupError(f"cell {cell!r} has no part {part}")
    if m:
        cell = m.group(("mean", "lo", "hi").index(part) + 1)
    if neg:
        if not NUMBER.fullmatch(cell):
            raise LookupError(f"cell {cell!r} is not a number to negate")
        cell = cell[1:] if cell[0] == "-" else "-" + cell.lstrip("+")
    return cell


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


@functools.lru_cache(maxsize=None)
def _load(file):
    return json.loads(file.read_text())


def json_value(root, path, frag):
    """The text a JSON value must show as, given the link's text."""
    factor = None
    if "*" in frag:
        frag, f = frag.split("*", 1)
        factor = float(f)
    file = root / path
    if not file.is_file():
        raise LookupError(f"no file {path}")
    try:
        value = _resolve(_load(file), frag)
    except (KeyError, IndexError, ValueError, TypeError):
        raise LookupError(f"no key {frag} in {path}") from None
    return value, factor


def _json_matches(text, value, factor):
    if isinstance(value, str):
        return factor is None and text == value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if not NUMBER.fullmatch(text) or text.endswith("%"):
        return False
    digits = len(text.split(".")[1].split("e")[0]) if "." in text else 0
    sep = "," if "," in text else ""
    shown = f"{value * (factor or 1):{sep}.{digits}f}"
    return shown == text or (text[0] == "+" and value > 0
                             and "+" + shown == text)


def link_problems(text, root, tables):
    """Every link into results/ must name its source and equal it."""
    out = []
    for m in LINK.finditer(text):
        shown, target = m.group(1), m.group(2)
        if not target.startswith("results/"):
            continue
        path, _, frag = target.partition("#")
        where = f"[{shown}]({target})"
        if not frag:
            if QUANTITY.search(shown):
                out.append(f"{where}: a number needs a #key or #table-")
            elif not (root / path).exists():
                out.append(f"{where}: no such path")
            continue
        try:
            if frag.startswith("table-"):
                name, _, spec = frag[len("table-"):].partition("/")
                want = f"results/experiments/{name.split('-')[0]}/"
                if path != want:
                    raise LookupError(f"path must be {want}")
                cell = table_cell(tables, name, spec)
                if shown != cell:
                    how = ", negated," if spec.endswith("/neg") else ""
                    out.append(f"{where}: the cell{how} reads {cell!r}")
            else:
                value, factor = json_value(root, path, frag)
                if not _json_matches(shown, value, factor):
                    out.append(f"{where}: the file holds {value!r}")
        except LookupError as e:
            out.append(f"{where}: {e}")
    return out


def prose_mask(text):
    """The text with checked links, table markers and marked tables blanked
    out (same length, so offsets still point into the original)."""
    chars = list(text)

    def blank(a, b):
        chars[a:b] = [c if c == "\n" else " " for c in chars[a:b]]
    for m in LINK.finditer(text):
        if m.group(2).startswith("results/"):
            blank(m.start(), m.end())
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    for i, j, _ in marked_tables(text).values():
        blank(starts[i], starts[j])
    return "".join(chars)


def number_problems(text, allow):
    """Every quantity in the prose not linked and not allowed."""
    masked = prose_mask(text)
    spans = [(m.start(), m.end()) for rule, _ in RULES
             for m in rule.finditer(masked)]
    out, used = [], set()
    for snippet, reason in allow:
        hits = [m.start() for m in re.finditer(re.escape(snippet), text)]
        if len(hits) != 1:
            out.append(f"ALLOW entry {snippet!r} occurs {len(hits)} times "
                       "(must be once)")
            continue
        spans.append((hits[0], hits[0] + len(snippet), snippet))
    for m in QUANTITY.finditer(masked):
        cover = [s for s in spans if s[0] <= m.start() and m.end() <= s[1]]
        if cover:
            used.update(s[2] for s in cover if len(s) == 3)
            continue
        line = text.count("\n", 0, m.start()) + 1
        a = max(text.rfind("\n", 0, m.start()) + 1, m.start() - 30)
        context = text[a:m.end() + 30].split("\n")[0]
        out.append(f"line {line}: unlinked {m.group(0)!r} in "
                   f"{context!r}")
    for snippet, _ in allow:
        if snippet not in used and text.count(snippet) == 1:
            out.append(f"ALLOW entry {snippet!r} covers no number (stale)")
    return out


def table_problems(text, rebuild):
    """Every marked table must equal its rebuild from the JSON."""
    out = []
    for name, (_, _, lines) in marked_tables(text).items():
        if name not in rebuild:
            out.append(f"table {name}: no rebuild in tools/report_tables")
            continue
        try:
            want = rebuild[name]()
        except Exception as e:  # a record missing or of an older shape
            out.append(f"table {name}: the rebuild failed: {e!r}")
            continue
        if "\n".join(lines) != want:
            out.append(f"table {name} differs from its rebuild")
    return out


def problems(text, root=ROOT, allow=ALLOW):
    """Links and prose numbers (not the table rebuild)."""
    return (link_problems(text, root, marked_tables(text))
            + number_problems(text, allow))


def _report(found):
    return "\n".join(found)


# ---- claims the numbers alone cannot check --------------------------------
# A right number under the wrong key, a verdict or direction word turned
# around, a seed count changed, a placeholder left in: none changes a
# linked value, so each has its own check below.

BIGRAM_BAR = 0.1  # transformer.recipes.BIGRAM_MARGIN, the report's bar

# A verdict or direction stated in words. Every occurrence in the prose
# (links blanked) must lie inside a CLAIMS snippet.
VERDICT_WORD = re.compile(
    r"\b(?:held|failed|inconclusive|caught|missed|neither|better|worse|"
    r"fell behind|kept up|trailed|trails|beats?|cleared|clears)\b"
    r"(?![- ]out)", re.I)
# A count of seeds ("five seeds each", "one seed"): must lie inside a CLAIMS
# snippet too, so that its check sees the number.
SEED_COUNT = re.compile(
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|\d+)\s+"
    r"(?:\w+\s+)?seeds?\b", re.I)
# A placeholder: an all-capitals token with a hyphen ("POSTNORM-EXPECTED",
# "E15-TODO"), or TODO / TBD / FIXME / XXX.
PLACEHOLDER = re.compile(
    r"\b[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*-[A-Z]{3,}\b|\b(?:TODO|TBD|FIXME|XXX)\b")

_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine".split())}


def _book(root, key):
    """A value of results/report/book_numbers.json, "chapter.key"."""
    chapter, name = key.split(".", 1)
    return _load(root / "results/report/book_numbers.json")[chapter][name]


def _arms(root, exp):
    """{(stratum, value): [record, ...]} of one experiment's grid records."""
    out = {}
    for path in sorted((root / "results/experiments" / exp).glob("*.json")):
        rec = _load(path)
        stratum = rec.get("stratum")  # a crossed one (E19) reads as a list
        stratum = tuple(stratum) if isinstance(stratum, list) else stratum
        out.setdefault((stratum, rec.get("value")), []).append(rec)
    return out


def _mean(recs, metric):
    vals = [r["final"][metric] for r in recs]
    return sum(vals) / len(vals)


def _seeds(root, *exps):
    """The set of seed counts per arm over the experiments (one value when
    every arm ran the same seeds)."""
    return {len({r["seed"] for r in recs})
            for e in exps for recs in _arms(root, e).values()}


def _count(word):
    return _WORDS[word.lower()] if word.lower() in _WORDS else int(word)


def _seed_claim(count, *exps):
    return lambda root: _seeds(root, *exps) == {count}


def _below_bar(root, exp):
    return {k for k, recs in _arms(root, exp).items()
            if _mean(recs, "below_bigram") < BIGRAM_BAR}


# (snippet of the report, check): the snippet must occur exactly once, and
# its check (a function of the tree's root, true when the records bear the
# claim out) must hold; a string instead of a check says why the words are
# not a measured claim. Each verdict word and each seed count of the prose
# must lie inside one of these snippets: a claim turned around ("No arm
# missed the bar", "better by", "five seeds") no longer matches its snippet,
# and its new words are covered by none.
CLAIMS = [
    ("A prediction **held** only\nwhen the whole paired interval supports it, "
     "**failed** when the whole interval\ncontradicts it, and is "
     "**inconclusive** otherwise", "the verdict rule, a definition"),
    ("failed that test in every run (section 9)",
     "the first version's records, in the git history"),
    ("1,600 steps, three seeds each", _seed_claim(3, "E30")),
    ("post-norm is already worse at", lambda root: (
        _book(root, "15_ablations.e40_early_fd_400") in ("depth 2", "depth 4")
        and float(_book(root, "15_ablations.e40_post2_1x_lo")) > 0.05)),
    ("the order of the arms held at every budget", lambda root: (
        _book(root, "15_ablations.e30_v_rank") == "held")),
    ("no positions trails the best encoding", lambda root: all(
        float(_book(root, f"15_ablations.e30_gap_{b}_m")) > 0
        for b in (400, 1600))),
    ("one seed went below it",
     lambda root: str(_book(root, "07_bigram.bg_tf_n_below")) == "1"),
    ("one seed reached",
     lambda root: str(_book(root, "07_bigram.bg_tf_n_below")) == "1"),
    ("Five arms, five seeds each", lambda root: (
        _seeds(root, "E4") == {5} and len(_arms(root, "E4")) == 5)),
    ("two seeds).", _seed_claim(2, "E14")),
    ("depths 2, 4, 8 and 16, three seeds each", _seed_claim(3, "E6")),
    ("The verdict on the prediction (no better by more than",
     "E22's prediction, quoted"),
    ("without the scale, no better than with it", "E22's prediction, quoted"),
    ("unscaled is surely better, by", lambda root: (
        float(_book(root, "15_ablations.e22_d_hi")) < 0)),
    ("no warm-up surely worse, by", lambda root: (
        float(_book(root, "15_ablations.e26_d_lo")) > 0)),
    ("Only the unscaled sinusoidal arm missed the bar", lambda root: (
        _below_bar(root, "E4") == {(None, "sinusoidal")})),
    ("The control cleared the bigram bar", lambda root: (
        (None, "none") not in _below_bar(root, "E4"))),
    ("every arm that learned got *worse* on the unseen", lambda root: all(
        float(_book(root, f"15_ablations.abl_e4_rise_{a}_m")) > 0
        for a in ("none", "rope", "sinusoidal-matched"))),
    ("The predicted ordering held for the matched table",
     "one part of E4's ordering, whose whole is linked as failed"),
    ("Post-norm trailed pre-norm at depths 2 and 4", lambda root: all(
        _mean(_arms(root, "E6")[(d, "post")], "val_loss")
        > _mean(_arms(root, "E6")[(d, "pre")], "val_loss") for d in (2, 4))),
    ("seeds four heads beat one by", lambda root: (
        float(_book(root, "15_ablations.e35_d41_hi")) < 0)),
    ("but four heads beat one by", lambda root: (
        float(_book(root, "15_ablations.e35_d41_hi")) < 0)),
    ("one worse by more than $\\delta$", "E31's prediction, quoted"),
    ("A failure test that failed, and its repair",
     "the first E13, in the git history (section 9)"),
    ("can beat $\\ln V$", "a property of the task, derived in chapter 15"),
    ("so both planted bugs are caught for every seed", lambda root: (
        _book(root, "92_runner.pr_e13_caught") == "held")),
    ('"no better than 1,024"', "E9's first prediction, quoted"),
    ("none of\nthe", lambda root: (
        str(_book(root, "07_bigram.ng_n_below")) == "0")),
    ("a feed-forward ratio of 1 clears the bar",
     "E3's first prediction, quoted; the margin it reached is linked"),
    ("(one seed per cell)", _seed_claim(1, "E19")),
    ("nats worse than pre-norm ([", lambda root: _book(
        root, "15_ablations.e6b_s2_8_post_read") == "worse"),
    ("there ([", lambda root: _book(
        root, "15_ablations.e6b_s2_8_post_sqrtd_read") == "within"),
    ("Five paired seeds at each arm's best cell (E21, E32)",
     "stage 2's declared seeds, a plan stated as such"),
    ("neither draft speeds decoding up at any γ; the bigram draft's "
     "acceptance below", "E33's predictions 1 and 2, quoted"),
    ("both falsified", lambda root: all(
        _book(root, f"20_speculative.spec_v{i}") == "falsified"
        for i in (1, 2))),
    ("both seeds short; the prediction", lambda root: all(
        r["final"]["below_bigram"] < BIGRAM_BAR
        for r in _arms(root, "E14")[(0.003, 200)])),
    ("Over three seeds", lambda root: {0} | {  # seed 0: the E15b ladder
        json.loads(p.read_text())["seed"] for p in
        (root / "results/experiments/E15b_seeds").glob("*.json")} == {0, 1, 2}),
]


# A key part and the words that name it in prose, where they differ.
KEY_WORDS = {"held": ("held", "predict"), "fals": ("falsifier",),
             "attn": ("attention", "attn"),
             "fired": ("falsifier", "fired"), "close": ("close", "within"),
             "ok": ("ok", "correct"), "verdict": ("verdict", "predict")}


def _names(part, word):
    """Whether a prose word names a key part: digits exactly, letters as
    the word's beginning ("grad" by "gradients"), or a KEY_WORDS word."""
    if part.isdigit():
        return word == part
    return any(word.startswith(k) for k in KEY_WORDS.get(part, (part,)))


def key_problems(text, root):
    """A link whose value another key of the same file also holds (a
    sibling: one `_`-separated part differs) must be the nearest of them to
    be named in its paragraph's prose: for abl_e6_lf_post_16 against
    abl_e6_lf_post_2, "16" must be mentioned nearer the link than "2",
    a mention before the link counting before any after it (links
    themselves are not prose). Otherwise a right number under the
    wrong key passes every value check."""
    out = []
    masked = prose_mask(text)
    for m in LINK.finditer(text):
        shown, target = m.group(1), m.group(2)
        path, _, frag = target.partition("#")
        if (not target.startswith("results/") or not frag or "*" in frag
                or frag.startswith("table-")):
            continue
        try:
            parent_key, _, leaf = frag.rpartition(".")
            data = _load(root / path)
            parent = _resolve(data, parent_key) if parent_key else data
        except (LookupError, KeyError, IndexError, ValueError, TypeError,
                OSError):
            continue
        if not isinstance(parent, dict) or leaf not in parent:
            continue
        mine = leaf.lower().split("_")
        rivals = {}  # position -> {differing part: sibling key}
        for other, value in parent.items():
            theirs = other.lower().split("_")
            if other == leaf or len(theirs) != len(mine):
                continue
            diff = [i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y]
            if (len(diff) == 1 and mine[diff[0]] not in ("m", "lo", "hi")
                    and _json_matches(shown, value, None)):
                rivals.setdefault(diff[0], {})[theirs[diff[0]]] = other
        a = text.rfind("\n\n", 0, m.start()) + 2
        b = text.find("\n\n", m.end())
        b = len(text) if b < 0 else b
        words = [(w.start() + a, w.group(0)) for w in
                 re.finditer(r"[a-z0-9]+", masked[a:b].lower())]

        def distance(part):
            """(0, d) for a mention d characters before the link, (1, d)
            after it: prose names a quantity before it gives it."""
            ds = [(0, m.start() - pos) if pos < m.start()
                  else (1, pos - m.end())
                  for pos, w in words if _names(part, w)]
            return min(ds) if ds else None
        for i, theirs in rivals.items():
            mine_d = distance(mine[i])
            nearer = sorted(other for part, other in theirs.items()
                            if (d := distance(part)) is not None
                            and (mine_d is None or d < mine_d))
            if mine_d is None or nearer:
                why = (f"{nearer} named nearer" if nearer else
                       f"the paragraph never names {mine[i]!r}")
                out.append(f"[{shown}]({target}): siblings "
                           f"{sorted(theirs.values())} hold the same value; "
                           f"{why}")
    return out


def claim_problems(text, root, claims=None):
    """Every CLAIMS snippet once and borne out; every verdict word, seed
    count and placeholder of the prose covered (or, for a placeholder,
    absent)."""
    claims = CLAIMS if claims is None else claims
    out, spans = [], []
    for snippet, check in claims:
        hits = [m.start() for m in re.finditer(re.escape(snippet), text)]
        if len(hits) != 1:
            out.append(f"claim {snippet!r} occurs {len(hits)} times (must be "
                       "once; if it was rewritten, rewrite its CLAIMS entry "
                       "and check)")
            continue
        spans.append((hits[0], hits[0] + len(snippet)))
        if callable(check):
            try:
                ok = check(root)
            except (LookupError, KeyError, ValueError, TypeError, OSError) as e:
                ok = False
                out.append(f"claim {snippet!r}: its check failed: {e!r}")
            else:
                if not ok:
                    out.append(f"claim {snippet!r} contradicts its records")
    masked = prose_mask(text)
    for pattern, what in ((VERDICT_WORD, "verdict or direction word"),
                          (SEED_COUNT, "seed count")):
        for m in pattern.finditer(masked):
            if any(a <= m.start() and m.end() <= b for a, b in spans):
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"line {line}: {what} {m.group(0)!r} in no CLAIMS "
                       "entry")
    for m in PLACEHOLDER.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(f"line {line}: placeholder {m.group(0)!r}")
    return out


def semantic_problems(text, root=ROOT, claims=None):
    return key_problems(text, root) + claim_problems(text, root, claims)


# ---- the real report ------------------------------------------------------

def test_report_numbers():
    found = problems(REPORT)
    assert not found, "\n" + _report(found)


def test_report_has_linked_numbers():
    links = [m for m in LINK.finditer(REPORT)
             if "#" in m.group(2) and NUMBER.fullmatch(m.group(1))]
    assert len(links) >= 40
    assert any("#table-" in m.group(2) for m in links)


def test_report_sections():
    assert "## 9. What I Expected And Did Not Get" in REPORT
    body = REPORT.split("What I Expected And Did Not Get", 1)[1]
    body = body.split("\n## ", 1)[0]
    assert len(body.split()) > 100
    assert "contradicted" in body or "failed" in body


def test_report_tables_match_json():
    tables = marked_tables(REPORT)
    assert {"E4", "E6", "E14"} <= set(tables)
    found = table_problems(REPORT, report_tables.TABLES)
    assert not found, "\n" + _report(found)


def test_report_length():
    """2,000-3,000 words of prose (tables and link targets not counted)."""
    text = re.sub(r"\(results/[^)]*\)", "", REPORT)
    prose = [line for line in text.splitlines() if not line.startswith("|")]
    words = len(" ".join(prose).split())
    assert 2000 <= words <= 3000, words


def test_chapter_tables_match_json():
    """Every experiment's table is shown, exactly, from its records: chapter
    15's ablations, the probes' in the runner appendix (where one box
    holds several tables, each between blank lines), and E33's and E34's
    in their own chapters."""
    shown = []
    for name in ("15_ablations", "92_runner", "20_speculative",
                 "21_rope_base", "19_sliding_window"):
        nb = json.loads((ROOT / "book" / f"{name}.ipynb").read_text())
        shown += [block for c in nb["cells"] for o in c.get("outputs", [])
                  if "text/markdown" in o.get("data", {})
                  for block in "".join(o["data"]["text/markdown"])
                  .split("\n\n")]
    root = ROOT / "results" / "experiments"
    for exp_id, exp in EXPERIMENTS.items():  # every table is shown
        want = summary_table(exp, load_runs(exp_id, root), exp.metrics)
        assert want in shown, exp_id


def test_book_numbers_fresh():
    """results/report/book_numbers.json equals what the executed notebooks
    hold now (run `make numbers` after re-executing)."""
    import book_numbers
    assert book_numbers.main(["--check"]) == 0


# ---- the checker on a synthetic report, and planted errors ---------------

FIXTURE_TABLE = """\
| arm | loss at T = 64 | none minus this (paired) | diverged |
|---|---|---|---|
| none | 4.782 [4.754, 4.810] | -0.047 [-0.053, -0.040] | 0/5 |
| rope | 4.703 [4.659, 4.746] | 0.079 [0.036, 0.123] | 1/5 |"""

_X = "results/experiments/X1/#table-X1/"
FIXTURE = f"""# A synthetic report

## 1. Set-up

Intervals are 95% intervals over seeds. Every run trains at $T = 64$ on
[204,800](results/n.json#tokens) tokens; the bigram scores
[4.004](results/n.json#glue.bigram) nats and the gap is
[-0.178](results/n.json#glue.gap) bits per byte (chapter 12).

<!-- table:X1 -->
{FIXTURE_TABLE}

RoPE ends at [4.703]({_X}row=rope/col=loss-at-t-64/part=mean) nats, better
than none by [0.079]({_X}row=rope/col=none-minus-this-paired/part=mean)
(interval [0.036]({_X}row=rope/col=none-minus-this-paired/part=lo) to
[0.123]({_X}row=rope/col=none-minus-this-paired/part=hi)); at twice the
trained length none's later positions were lower by
[0.047]({_X}row=none/col=none-minus-this-paired/part=mean/neg), and
[1/5]({_X}row=rope/col=diverged) RoPE runs diverged. A step took
[47.1](results/n.json#timing.p50*1e3) ms, the late positions moved by
[-0.047](results/n.json#rise), and GPT-2 in float32 ran E4 for 5 seeds.
"""
FIXTURE_JSON = {"tokens": 204800, "rise": -0.0471, "timing": {"p50": 0.04712},
                "glue": {"bigram": "4.004", "gap": "-0.178"}}
FIXTURE_ALLOW = [("at twice the\ntrained length", "2T, the setting measured")]


@pytest.fixture
def fixture_root(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "n.json").write_text(json.dumps(FIXTURE_JSON))
    return tmp_path


def _links(text, table):
    """Numeric links, table-cell links first when `table` is set."""
    return [m for m in LINK.finditer(text)
            if NUMBER.fullmatch(m.group(1)) and "#" in m.group(2)
            and (("#table-" in m.group(2)) == table)]


def _plant(text, m, shown):
    return text[:m.start()] + f"[{shown}]({m.group(2)})" + text[m.end():]


def _flip(x):
    return x[1:] if x[0] == "-" else "-" + x.lstrip("+")


def _bump(x):
    return x[:-1] + str((int(x[-1]) + 1) % 10)


CASES = {
    "fixture": (lambda root: (FIXTURE, root, FIXTURE_ALLOW)),
    "REPORT.md": (lambda root: (REPORT, ROOT, ALLOW)),
}


@pytest.fixture(params=sorted(CASES))
def case(request, fixture_root):
    return CASES[request.param](fixture_root)


def _unplaced(found):
    return [re.sub(r"^line \d+: ", "", p) for p in found]


@functools.lru_cache(maxsize=None)
def _before(text, root, allow):
    return set(_unplaced(problems(text, root, list(allow))))


def _new(case, planted):
    """The problems the planted text has and the original has not."""
    text, root, allow = case
    before = _before(text, root, tuple(allow))
    return [p for p in _unplaced(problems(planted, root, allow))
            if p not in before]


def test_fixture_is_clean(fixture_root):
    assert problems(FIXTURE, fixture_root, FIXTURE_ALLOW) == []
    assert table_problems(FIXTURE, {"X1": lambda: FIXTURE_TABLE}) == []


def test_planted_wrong_cell_is_reported(case):
    text = case[0]
    m = _links(text, table=True)[0]
    found = _new(case, _plant(text, m, _bump(m.group(1))))
    assert len(found) == 1 and "reads" in found[0], found


@pytest.mark.parametrize("table", [True, False])
def test_planted_sign_flip_is_reported(case, table):
    text = case[0]
    for m in _links(text, table)[:3]:  # "0.047" against "-0.047"
        found = _new(case, _plant(text, m, _flip(m.group(1))))
        assert len(found) == 1 and m.group(2) in found[0], found


def test_planted_neg_flip_is_reported(case):
    text = case[0]
    m = [m for m in _links(text, table=True) if m.group(2).endswith("/neg")]
    assert m, "the report states a magnitude through /neg"
    found = _new(case, _plant(text, m[0], _flip(m[0].group(1))))
    assert len(found) == 1 and "reads" in found[0], found


@pytest.mark.parametrize("word", [
    "fiftyfold", "16x", "1.3x", "three times", "twice", "half", "tenfold",
    "a third", "sixteen", "12%", "2,048", "64", "0.047", "-0.047", "6e-07"])
def test_planted_unlinked_number_is_reported(case, word):
    text = case[0]
    first = text.index("\n\n") + 2  # a new paragraph under the title
    planted = text[:first] + f"It ran {word} faster.\n\n" + text[first:]
    found = _new(case, planted)
    assert len(found) == 1 and f"unlinked {word!r}" in found[0], found


def test_planted_wrong_json_value_is_reported(case):
    text = case[0]
    m = _links(text, table=False)[0]
    found = _new(case, _plant(text, m, _bump(m.group(1))))
    assert len(found) == 1 and "the file holds" in found[0], found


def test_planted_wrong_table_is_reported(case):
    """A marked table that differs from its rebuild (here: the table as
    written) by one digit is reported."""
    text = case[0]
    tables = marked_tables(text)
    rebuild = {n: (lambda w="\n".join(t[2]): w) for n, t in tables.items()}
    name, (_, _, lines) = next(iter(tables.items()))
    row = lines[2]
    k = max(i for i, c in enumerate(row) if c.isdigit())
    planted = text.replace(row, _bump(row[:k + 1]) + row[k + 1:], 1)
    assert table_problems(text, rebuild) == []
    assert table_problems(planted, rebuild) == [
        f"table {name} differs from its rebuild"]


@pytest.mark.parametrize("spec, error", [
    ("row=rope/col=loss-at-t-64", "needs part="),
    ("row=rope/col=diverged/part=mean", "has no part"),
    ("row=rope/col=loss/part=mean", "is not one of"),
    ("row=gpt/col=diverged", "matches 0 rows"),
    ("col=diverged", "needs row= and col="),
    ("row=rope/col=diverged/sign=-", "unknown segment"),
])
def test_table_link_must_name_one_cell(spec, error):
    with pytest.raises(LookupError, match=error):
        table_cell(marked_tables(FIXTURE), "X1", spec)


def test_table_link_path_and_part(fixture_root):
    tables = marked_tables(FIXTURE)
    assert table_cell(tables, "X1", "row=none/col=none-minus-this-paired/"
                      "part=lo") == "-0.053"
    assert table_cell(tables, "X1", "row=none/col=none-minus-this-paired/"
                      "part=hi/neg") == "0.040"
    wrong = FIXTURE.replace("results/experiments/X1/#table-X1/row=rope/"
                            "col=diverged", "results/experiments/E4/"
                            "#table-X1/row=rope/col=diverged")
    found = problems(wrong, fixture_root, FIXTURE_ALLOW)
    assert len(found) == 1 and "path must be" in found[0], found


def test_allow_entries_are_per_occurrence(fixture_root):
    twice = FIXTURE + "\nagain at twice the\ntrained length.\n"
    assert any("occurs 2 times" in p
               for p in problems(twice, fixture_root, FIXTURE_ALLOW))
    stale = FIXTURE_ALLOW + [("## 1. Set-up", "a heading")]
    assert problems(FIXTURE, fixture_root, stale) == [
        "ALLOW entry '## 1. Set-up' covers no number (stale)"]


@pytest.mark.parametrize("text", [
    "E4 and E14", "GPT-2", "float32", "5 seeds", "chapter 12",
    "sections 6 and 7", "$T = 64$", "95% interval", "positions 64 to 127",
    "Prediction: within 0.05 nats of 5.6."])
def test_names_and_definitions_need_no_link(fixture_root, text):
    assert problems(f"# T\n\n{text}\n", fixture_root, []) == []


# ---- the semantic checks: the real report, then planted errors -----------

def test_report_semantics():
    """No right value under a wrong sibling key, every verdict word and seed
    count inside a checked claim, no placeholder."""
    found = semantic_problems(REPORT)
    assert not found, "\n" + _report(found)


def _new_semantic(planted):
    before = set(_unplaced(semantic_problems(REPORT)))
    return [p for p in _unplaced(semantic_problems(planted))
            if p not in before]


def test_planted_right_value_under_a_sibling_key_is_reported():
    """Every link whose value a sibling key shares, moved to that sibling
    (the value still right), is reported."""
    planted_any = 0
    for m in LINK.finditer(REPORT):
        path, _, frag = m.group(2).partition("#")
        if not path.endswith(".json") or "." not in frag or "*" in frag:
            continue
        parent_key, _, leaf = frag.rpartition(".")
        try:
            parent = _resolve(_load(ROOT / path), parent_key)
        except (KeyError, IndexError, ValueError, TypeError):
            continue
        if not isinstance(parent, dict):
            continue
        mine = leaf.split("_")
        for other, value in parent.items():
            theirs = other.split("_")
            diff = [i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y]
            if (other == leaf or len(theirs) != len(mine) or len(diff) != 1
                    or mine[diff[0]] in ("m", "lo", "hi")
                    or not _json_matches(m.group(1), value, None)):
                continue
            target = f"{path}#{parent_key}.{other}"
            planted = (REPORT[:m.start()] + f"[{m.group(1)}]({target})"
                       + REPORT[m.end():])
            assert problems(planted) == []  # every value check passes
            found = _new_semantic(planted)
            assert any(target in p for p in found), (target, found)
            planted_any += 1
    assert planted_any >= 10  # E6's depths and parts, E3-E8's verdicts


REVERSALS = [  # the audit's planted reversals of unlinked claims
    ("Only the unscaled sinusoidal arm missed the bar",
     "No arm missed the bar"),
    ("so both planted bugs are caught for every seed",
     "so neither planted bug is caught for any seed"),
    ("seeds four heads beat one by", "seeds four heads trails one by"),
    ("Post-norm trailed pre-norm at depths 2 and 4",
     "Post-norm beat pre-norm at depths 2 and 4"),
    ("The control cleared the bigram bar", "The control missed the bigram bar"),
]


@pytest.mark.parametrize("old, new", REVERSALS)
def test_planted_reversed_claim_is_reported(old, new):
    assert REPORT.count(old) == 1
    found = _new_semantic(REPORT.replace(old, new))
    assert any(repr(old) in p for p in found), found  # its claim is gone
    assert any("in no CLAIMS entry" in p for p in found), found


@pytest.mark.parametrize("snippet", [s for s, _ in CLAIMS
                                     if SEED_COUNT.search(s)])
def test_planted_seed_count_is_reported(snippet):
    """Each stated count of seeds, changed, is reported."""
    m = SEED_COUNT.search(snippet)
    word = m.group(0).split()[0]
    other = "seven" if word.lower() != "seven" else "four"
    planted = REPORT.replace(snippet, snippet.replace(word, other, 1))
    found = _new_semantic(planted)
    assert any("seed count" in p and other in p for p in found), found


@pytest.mark.parametrize("token", ["POSTNORM-EXPECTED", "E15-TODO", "TODO",
                                   "FIXME", "TBD"])
def test_planted_placeholder_is_reported(token):
    first = REPORT.index("\n\n") + 2
    planted = REPORT[:first] + f"{token}\n\n" + REPORT[first:]
    found = _new_semantic(planted)
    assert found == [f"placeholder {token!r}"], found


def test_claim_checks_read_the_records(tmp_path):
    """A claim whose record says otherwise is reported: the checks are not
    constant."""
    numbers = json.loads((ROOT / "results/report/book_numbers.json")
                         .read_text())
    numbers["92_runner"]["pr_e13_caught"] = "failed"
    numbers["15_ablations"]["e35_d41_hi"] = "+0.006"
    (tmp_path / "results" / "report").mkdir(parents=True)
    (tmp_path / "results/report/book_numbers.json").write_text(
        json.dumps(numbers))
    (tmp_path / "results" / "experiments").symlink_to(
        ROOT / "results" / "experiments")
    found = claim_problems(REPORT, tmp_path)
    assert sorted(found) == sorted([
        "claim 'so both planted bugs are caught for every seed' "
        "contradicts its records",
        "claim 'seeds four heads beat one by' contradicts its records",
        "claim 'but four heads beat one by' contradicts its records"]), found


def test_checker_runs_on_a_copy(tmp_path):
    """`REPORT_MD=copy python tests/test_report.py` checks another copy of
    the report: clean on this one, exit 1 on a planted placeholder."""
    import subprocess
    copy = tmp_path / "REPORT.md"
    copy.write_text(REPORT)
    cmd = [sys.executable, str(Path(__file__)), str(copy)]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    copy.write_text(REPORT + "\nPOSTNORM-EXPECTED\n")
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 1 and "POSTNORM-EXPECTED" in run.stdout


def main(argv=None):
    """python tests/test_report.py [PATH]: every problem of the report at
    PATH (default REPORT.md) against this tree's JSON; exit 1 if any."""
    args = sys.argv[1:] if argv is None else argv
    text = Path(args[0]).read_text() if args else REPORT
    found = problems(text) + semantic_problems(text)
    print("\n".join(found) if found else "no problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tools"))
    raise SystemExit(main())
