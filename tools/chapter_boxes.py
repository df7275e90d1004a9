"""Each numbered chapter opens with a box: the question it answers, and its
headline measured number, glued from a key the chapter itself produces.

    python tools/chapter_boxes.py apply    # write or update the boxes
    python tools/chapter_boxes.py check    # exit 1 if a box is missing/stale

The box is a MyST admonition placed right after the chapter's title line,
marked by its class `chapter-box`; `apply` replaces an existing box and adds
a missing one (idempotent). It touches markdown only, so
`tools/literate.py refresh` carries it into the executed notebooks. The
numbers are `{glue:text}` roles; tests/test_chapter_boxes.py checks that
every key a box names is glued in its own chapter's executed notebook.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from literate_source import Paths  # noqa: E402


def g(key: str) -> str:
    return "{glue:text}`" + key + "`"


# chapter -> (the question, the headline answer with glued numbers)
BOXES: dict[str, tuple[str, str]] = {
    "01_softmax": (
        "How do scores become probabilities without overflowing, and what "
        "does temperature change?",
        f"Logits [1000, 999] give [{g('we_p0')}, {g('we_p1')}] with no "
        "overflow; scaling the logits by 100 shrinks the softmax Jacobian's "
        f"norm from {g('jac_norm_1')} to {g('jac_norm_100')}: a saturated "
        "softmax passes almost no gradient."),
    "02_corpus": (
        "What text does the book learn from, and what is held out?",
        f"{g('corpus_mb')} MB of Shakespeare in {g('corpus_docs')} documents, "
        f"{g('corpus_distinct_chars')} distinct characters; "
        f"{g('split_val_fraction')} is held out for validation."),
    "03_tokenizer": (
        "How does byte-level BPE turn any text into ids and back, exactly?",
        f"Our tokenizer reproduces tiktoken's ids on all {g('orc_tokens')} "
        f"tokens of the corpus ({g('orc_bpt')} bytes per token); at a "
        f"vocabulary of {g('cmp_v_last')} a token holds {g('cmp_bpt_last')} "
        "bytes on average."),
    "04_attention": (
        "What does attention compute, and why are its scores divided by "
        "$\\sqrt{d_k}$?",
        f"Without the scale, {g('dead_unscaled_256')} of softmax rows are "
        "saturated at $d_k = 256$. A lookup by content costs attention "
        f"{g('cq1_attn')} parameters at any length, against "
        f"{g('cq1_mlp_4096')} for an MLP over 4,096 positions."),
    "05_positions": (
        "What must a positional encoding provide, and how does RoPE "
        "provide it?",
        "A rotated score depends only on the offset $m - n$: across "
        f"absolute positions (3 to 1,000) it varies by {g('rope_spread')}, "
        "float64 rounding, and no norm moves."),
    "06_gpt": (
        "How do attention, normalisation and the feed-forward layer "
        "assemble into GPT?",
        f"Loaded with GPT-2 small's {g('n_gpt2_small')} parameters, the "
        f"book's model matches Hugging Face's logits to {g('err_hf')}."),
    "07_bigram": (
        "How low must a model's loss go before it has learned anything?",
        f"A counted bigram reaches {g('bg_bigram_val')} nats per token on "
        f"held-out text, against {g('bg_lnV')} for a uniform guess; the "
        f"entropy floor is estimated near {g('bg_floor')}."),
    "08_optimization": (
        "What do momentum, Adam, weight decay and warm-up each fix?",
        f"On a quadratic of condition number 100, heavy-ball momentum needs "
        f"{g('hb_n_hb')} steps where gradient descent needs {g('hb_n_gd')} "
        f"({g('hb_speedup')} times fewer)."),
    "09_training": (
        "Does the training loop work, and does the transformer beat the "
        "bigram?",
        f"It beats the bigram by {g('tr_margin')} nats per token "
        f"[{g('tr_margin_lo')}, {g('tr_margin_hi')}] over "
        f"{g('tr_n_seeds')} seeds, and overfits 200 tokens to "
        f"{g('tr_e10_final')} (E10)."),
    "10_cost_model": (
        "At what context length does attention become the bottleneck?",
        "At the book's width ($D = 128$) attention's FLOPs pass the rest at "
        f"{g('D128_cross')} tokens, but its measured time share passes half "
        f"at about {g('tc_D128')}; GPT-2 small's score matrix is "
        f"{g('g2_scores_8192_gb')} GB at $T = 8{{,}}192$."),
    "11_sampling": (
        "How does a distribution over the next token become text?",
        f"The tiny model ({g('tiny_params')} parameters, {g('tiny_val_loss')}"
        f" nats per token, {g('cpt_full')} characters per token) writes "
        "Shakespeare-shaped text; eight beams agree on "
        f"{g('beam_agree')} of {g('beam_n')} positions."),
    "12_kv_cache": (
        "What does the KV cache save, and what does inference memory cost?",
        "For GPT-2 small the cache outgrows the weights at "
        f"{g('GPT2_small_tstar')} tokens for one sequence and at "
        f"{g('GPT2_small_tstar16')} for a batch of 16."),
    "13_error_bars": (
        "How wide are the error bars on a loss, when tokens are not "
        "independent?",
        f"The token-level standard error is {g('tok_ratio')} times too "
        f"small: its \"95%\" interval covers the truth {g('tok_cover_naive')}%"
        f" of the time, the document-level one {g('tok_cover_doc')}%."),
    "14_calibration": (
        "Is the trained model's confidence calibrated?",
        f"Its expected calibration error is {g('ece_before')}; the fitted "
        f"temperature is {g('tau_hat')} [{g('tau_lo')}, {g('tau_hi')}]."),
    "15_ablations": (
        "Which design choices matter, measured with paired intervals?",
        "E4: with RoPE the held-out loss is "
        f"{g('abl_e4_val_rope_m')} nats per token, against "
        f"{g('abl_e4_val_none_m')} with no positional encoding at all. "
        "E30: at four times the budget the arms finish in the same order "
        f"(rank correlation {g('e30_rho')}), closer together."),
    "16_kernels": (
        "How much do hand-derived backward passes buy?",
        f"At the tiny shape the fused model trains {g('kn_speedup_tiny')} times "
        f"as fast (95% interval {g('kn_speedup_tiny_ci')}), and the autograd "
        f"tape of a batch falls from {g('kn_mem_ref')} to "
        f"{g('kn_mem_fused')}."),
}

CLASS = "chapter-box"
BOX = re.compile(r"^:::\{admonition\}[^\n]*\n:class: [^\n]*\b" + CLASS +
                 r"\b[^\n]*\n.*?^:::\n\n?", re.M | re.S)
TITLE = re.compile(r"^# .+\n", re.M)
ROLE = re.compile(r"\{glue:text\}`([^`:]+)`")


def render(name: str) -> str:
    question, answer = BOXES[name]
    return (f":::{{admonition}} The question, and the answer measured\n"
            f":class: tip {CLASS}\n"
            f"**{question}**\n\n{answer}\n:::\n\n")


def with_box(name: str, text: str) -> str:
    box = render(name)
    if BOX.search(text):
        return BOX.sub(lambda m: box, text, count=1)
    title = TITLE.search(text)
    if title is None:
        raise SystemExit(f"{name}: no `# title` line to put the box under")
    rest = text[title.end():].lstrip("\n")
    return text[:title.end()] + "\n" + box + rest


def keys(name: str) -> list[str]:
    return ROLE.findall(render(name))


def path(name: str) -> Path:
    return Paths.CHAPTERS / f"{name}.md"


def problems() -> list[str]:
    out = [f"{name}: BOXES names a chapter that does not exist"
           for name in BOXES if not path(name).exists()]
    numbered = sorted(p.stem for p in Paths.CHAPTERS.glob("*.md")
                      if re.fullmatch(r"(0[1-9]|1[0-6])_.*", p.stem))
    for name in numbered:
        if name not in BOXES:
            out.append(f"{name}: no box in tools/chapter_boxes.py")
            continue
        text = path(name).read_text(encoding="utf-8")
        if with_box(name, text) != text:
            out.append(f"{name}: box missing or stale "
                       "(run tools/chapter_boxes.py apply)")
    return out


def main(argv: list[str] | None = None) -> int:
    cmd = (argv if argv is not None else sys.argv[1:] or ["check"])[0]
    if cmd == "apply":
        changed = []
        for name in BOXES:
            p = path(name)
            if not p.exists():
                print(f"{name}: no chapter, skipped")
                continue
            text = p.read_text(encoding="utf-8")
            new = with_box(name, text)
            if new != text:
                p.write_text(new, encoding="utf-8")
                changed.append(name)
        print("boxes written in: " + (", ".join(changed) or "nothing"))
        if changed:
            print("now: .venv/bin/python tools/literate.py refresh "
                  + " ".join(changed))
        return 0
    if cmd == "check":
        found = problems()
        print("\n".join(found) or "every numbered chapter has its box")
        return 1 if found else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
