"""Every figure the book draws gets a number, a caption and a name.

    python tools/figure_captions.py apply   # set the captions in chapters/*.md
    python tools/figure_captions.py check   # exit 1 if a figure lacks one

A figure is a code cell whose output holds an image. Its caption lives in the
cell's options, `:mystnb: {figure: {caption: ..., name: ...}}`, which myst-nb
renders as a numbered figure (`numfig` is on) with the caption under it, and
which a chapter can cite as {numref}`fig-...`. This is cell metadata, not code:
`tools/literate.py refresh` carries it into the executed notebooks with their
outputs kept. `CAPTIONS` names each figure cell by the start of its source
(directives off), as tools/cell_policy.py does; `check` fails when an entry
finds no cell or an image-drawing cell has no caption.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cell_policy import code_cells  # noqa: E402
from literate_source import Paths  # noqa: E402

# chapter -> [(start of the cell's source, figure name, caption)]
CAPTIONS: dict[str, list[tuple[str, str, str]]] = {
    "01_softmax": [
        ("z5 = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])", "fig-temperature",
         "Temperature on five logits. Left: each probability against the "
         "temperature (log scale); the ranking never changes. Right: the "
         "entropy rises from 0 towards its ceiling ln V as the temperature "
         "grows."),
    ],
    "03_tokenizer": [
        ('Vs = [r["vocab_size"] for r in rows]', "fig-vocab-compression",
         "Vocabulary size against sequence length: bytes per token (left) "
         "and tokens per line (right) for BPE vocabularies trained on the "
         "corpus; each doubling of the vocabulary buys less."),
    ],
    "04_attention": [
        ("import matplotlib.pyplot as plt\nfrom matplotlib.patches import "
         "Rectangle\n\nfig, ax = plt.subplots(figsize=(9.6, 3.4))",
         "fig-attention-shapes",
         "Attention's shapes for one head: queries (T x d_k) times keys "
         "transposed give a T x S table of scores; the causal mask sets the "
         "future keys of each query to minus infinity (dark), the softmax "
         "makes each row a distribution that is zero there, and the weights "
         "times the values (S x d_v) give one output row per query."),
        ("fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))", "fig-mask-order",
         "The causal mask, before and after the softmax, for one head: the "
         "attention weights of each query (rows) over the keys (columns). "
         "Masked before, every row sums to one over the keys it may see; "
         "masked after, the same triangle with smaller row sums (printed at "
         "the right), because the future keys stayed in the denominator."),
        ("widths = [4, 16, 64, 256, 1024, 4096]", "fig-score-saturation",
         "Why the scores are scaled. Mean row entropy (left) and the share "
         "of softmax rows that pass essentially no gradient (right) against "
         "the key width, with and without the division by the square root "
         "of the width."),
    ],
    "05_positions": [
        ("import math as _m", "fig-rope-rotation",
         "RoPE in one plane: a query and a key rotated by t*omega and "
         "t'*omega (omega = 0.5). Three pairs with the same offset t - t' = 1 "
         "have the same angle between them, so the same dot product (printed "
         "at each query): the score sees the offset, never the absolute "
         "position."),
        ("P64 = sinusoidal_encoding(100, 64)  # (T, D)", "fig-sinusoidal",
         "The sinusoidal encoding of 100 positions in 64 dimensions: the "
         "first dimensions turn fast, the last ones slowly."),
    ],
    "06_gpt": [
        ("from matplotlib.patches import FancyBboxPatch",
         "fig-norm-placements",
         "Where the normalisation sits, one sub-layer (F is attention or the "
         "feed-forward layer). Pre-norm normalises only the branch's input, "
         "so the residual path from x upwards is an identity; post-norm "
         "normalises the sum, so every block rescales the stream; DeepNorm "
         "is post-norm with the residual weighted by alpha = (2L)^(1/4) and "
         "the branch's weights initialised smaller by beta."),
        ('res = json.loads(Path("../results/norm_gradients/grad_norms.json")',
         "fig-norm-gradients",
         "Gradient norm of each block's weights at initialisation, pre-norm "
         "(solid) against post-norm (dashed) at four depths, under GPT-2's "
         "initialisation (left) and a unit-scale one (right)."),
    ],
    "07_bigram": [
        ("from transformer.baseline import BigramLM", "fig-bigram-fit",
         "The bigram table fitted by full-batch Adam at two learning rates: "
         "training (dotted) and held-out (solid) loss against the step, with "
         "the counted bigram's held-out loss for reference."),
    ],
    "08_optimization": [
        ("def gd_path(lr, steps=50, lam=0.0, theta0=0.0):", "fig-gd-stability",
         "Gradient descent on a quadratic: the distance to the minimum "
         "against the step, for step sizes on either side of the stability "
         "boundary."),
        ("def steps_to_shrink(hs, lr, momentum, factor=1e-6, max_steps=5000):",
         "fig-momentum",
         "Error norm against the step on an ill-conditioned quadratic: "
         "gradient descent against heavy-ball momentum."),
        ("scales = torch.tensor([0.01, 1.0, 100.0])", "fig-decoupled-decay",
         "Weight decay, coupled and decoupled, on three parameters whose "
         "gradients differ in scale: with Adam + L2 (left) the decay depends "
         "on the gradient's size; AdamW (right) shrinks every parameter at "
         "the same rate, the dashed line."),
        ("from transformer import lr_at", "fig-lr-schedule",
         "The learning-rate schedule: linear warm-up, then cosine decay."),
        ("def update_sizes(warmup_steps, steps=300, max_lr=1e-3):",
         "fig-warmup-updates",
         "Adam's update size relative to the peak learning rate against the "
         "step, with and without warm-up: without it the first steps are the "
         "largest of the run."),
    ],
    "09_training": [
        ('det = e10["runs"]["detached"]', "fig-e10-overfit",
         "E10: the loss on 200 tokens against the step, for the correct "
         "model, a detached residual and a mask applied after the softmax, "
         "with the threshold 0.1."),
        ('sh = json.loads((results / "shuffled.json").read_text())',
         "fig-shuffled",
         "Shuffled targets: held-out loss minus ln V against the step; a "
         "model that cannot see the targets ends at ln V, and below it only "
         "by leaking."),
        ('bg = json.loads((results / "bigram.json").read_text())',
         "fig-transformer-vs-bigram",
         "The transformer against the bigram: training and held-out loss per "
         "seed, with the counted bigram's held-out loss and the entropy-floor "
         "bound."),
    ],
    "10_cost_model": [
        ('root = Path("..") if Path("../results").exists() else Path(".")',
         "fig-attention-share",
         "The quadratic part's share of the model's block against the "
         "context length, by FLOPs of the whole square (dashed) and by "
         "measured time through the model's tiled kernel (95% intervals), at "
         "two widths: in time it passes half somewhat before the FLOP count "
         "does, and at long contexts falls below the count of the square, "
         "whose masked half the kernel skips."),
    ],
    "11_sampling": [
        ("from matplotlib.patches import FancyBboxPatch as _Box",
         "fig-decode-loop",
         "The decode loop: the model maps the tokens so far to logits for the "
         "next one, a decoding rule chooses one token, and it is appended and "
         "fed back. Greedy, temperature, top-k and top-p differ only in the "
         "choosing box."),
        ("import matplotlib.pyplot as plt\n\nfig, axes = plt.subplots(1, 5",
         "fig-truncations",
         "The worked example's distribution p and the four rules applied to "
         "it: temperature 0.5 sharpens every bar, top-k and top-p delete the "
         "tail and renormalise what is left."),
    ],
    "12_kv_cache": [
        ("import matplotlib.pyplot as plt\nfrom matplotlib.patches import "
         "Patch, Rectangle", "fig-kv-cache",
         "What the KV cache saves, at step t = 6 of a three-layer model: "
         "recomputing runs every position of every layer again; with the "
         "cache only the new position is computed, and its query attends "
         "over the keys and values stored at the earlier steps (arrows)."),
        ("fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))",
         "fig-decode-latency",
         "E11: median time per generated token against the position being "
         "fed, ours with the cache, Hugging Face's with its cache, and ours "
         "recomputing everything, for the tiny model (left) and GPT-2 small "
         "(right)."),
        ("fig, ax = plt.subplots(figsize=(6.4, 4.8))", "fig-decode-roofline",
         "The decode roofline: measured median time per token against the "
         "floor set by the bytes each step must read."),
    ],
    "13_error_bars": [
        ("show = 40", "fig-coverage",
         "Nominal 95% intervals for the mean loss on 40 simulated evaluation "
         "sets (red: misses the true mean, dashed). Treating tokens as "
         "independent (left) makes the intervals far too narrow; averaging "
         "within documents first (right) gives intervals that cover."),
    ],
    "14_calibration": [
        ("fig, axes = plt.subplots(1, 2, figsize=(9, 4), sharey=True)",
         "fig-reliability",
         "Reliability diagrams of the trained model before (left) and after "
         "(right) temperature scaling: accuracy against mean confidence per "
         "bin, with the diagonal of perfect calibration."),
    ],
    "19_sliding_window": [
        ("fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)\n"
         "bands = (\"hop\", \"stack\", \"beyond\")", "fig-e39-reach",
         "E39: accuracy at the query by the distance d from the query to its "
         "key, in three bands per window W: within one window (hop), within "
         "only the two layers' stacked reach (stack), beyond both. Bars: mean "
         "over seeds; dots: seeds; dotted: chance, 1/V."),
        ("import matplotlib.pyplot as plt\n\nn = 16 * T", "fig-e36-long-context",
         "Left: held-out loss against the position in a 1,024-byte window "
         "for each arm of E36 (mean over seeds, bins doubling in width); "
         "every model was trained on positions 0-63 (dotted line). Right: "
         "loss on positions 256-1023 (filled) and on the late trained "
         "positions 32-63 (hollow) against forward FLOPs per token at that "
         "length."),
    ],
    "21_rope_base": [
        ("import matplotlib.pyplot as plt", "fig-rope-base-positions",
         "Held-out loss against the position in a 256-byte window for each "
         "RoPE arm (mean over seeds, 8-byte bins); the models were trained "
         "on positions 0-63 (dotted line)."),
    ],
    "16_kernels": [
        ('import matplotlib.pyplot as plt\n\nkinds = ("linear", "attention",',
         "fig-kernel-profile",
         "Where a training step's time goes, by kind of operation (self CPU "
         "time from PyTorch's profiler, two steps after the timed rounds): "
         "the linear layers' products, attention's products or fused "
         "kernel, compiled code, and everything else, for the book's model "
         "eager and compiled and for the platform model built from "
         "PyTorch's fused modules."),
    ],
    "15_ablations": [
        ("fig, axes = plt.subplots(1, len(E6B_DEPTHS), figsize=(12, 3.2), "
         "sharey=True)", "fig-e40",
         "E40: each placement minus pre-norm (nats, mean and 95% t interval "
         "over the seeds) at 1x, 2x and 4x the shared budget, one panel per "
         "depth; the band is the declared margin. The 4x points are E21's and "
         "E32's records on the same seeds."),
        ("import statistics\n\n\ndef last_block(recs, key):", "fig-e6b-grads",
         "E6 rebuilt, stage 2: the last block's gradient norm against depth "
         "(log-log), at step 0 and after step 10, median over the seeds, "
         "with Xiong et al.'s 1/sqrt(L) for pre-norm drawn through "
         "its depth-2 value."),
        ('import run_lookup_seeds  # noqa: E402',
         "fig-e15b-ladder",
         "E15b's size ladder: every rung run, parameters against the "
         "sequence length T, filled where the model reached 0.95 accuracy "
         "(attention: on all queries and on those farther than T/2), hollow "
         "where it missed. The answer per family and T is its lowest "
         "filled point. Small circles to the left: the two-head rungs of "
         "seeds 1 and 2."),
        ('attn_runs = [r for r in sweep.values() if r["arm"] == "attn"]',
         "fig-e15b-sweep",
         "E15b's recipe sweep (seed 100): held-out accuracy at the answer "
         "positions every 250 steps, inside the window MLP's 7-token window "
         "(left) and outside it (right), per initialisation and learning "
         "rate. Dashed: the copy-any-bound-value level; dotted: 1/V; solid: "
         "the 0.95 gate. A run that learns the lookup jumps off the plateau "
         "on both sides at once."),
        ("fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))", "fig-e4",
         "E4, positional encodings: held-out loss at T = 64 per arm (left) "
         "and the rise in loss from the first to the second half of a "
         "2T window (right)."),
        ("if e30_complete:\n    fig, axes = plt.subplots(1, 2", "fig-e30",
         "E30, E4's arms at three budgets: held-out loss against training "
         "tokens, mean of three seeds, at 400 (dotted), 800 (dashed) and "
         "1,600 steps (solid) (left), and the final loss per budget with "
         "its 95% interval (right). Grey: the bigram (dash-dot) and the "
         "byte n-gram (solid); the unscaled sinusoid starts above the "
         "frame."),
        ("fig, grid = plt.subplots(2, 2, figsize=(9.5, 6.2))", "fig-e6",
         "E6, pre-norm against post-norm across depth: gradient norm per "
         "block at initialisation, training loss, and gradient norm before "
         "clipping, against the step."),
    ],
}

OPTION = re.compile(r"^:mystnb:.*$")


def option_line(name: str, caption: str) -> str:
    """The cell's options: the numbered figure and its caption, and the
    caption again as the image's alternative text (read aloud, shown when
    the image does not load)."""
    return (":mystnb: " + json.dumps({"figure": {"caption": caption,
                                                 "name": name},
                                      "image": {"alt": caption}}))


def resolve(chapter: str, text: str):
    cells = code_cells(text)
    found, problems = {}, []
    for start, name, caption in CAPTIONS.get(chapter, []):
        hits = [i for i, c in enumerate(cells) if c.body.startswith(start)]
        if len(hits) != 1:
            problems.append(f"{chapter}: {len(hits)} cells start with "
                            f"{start!r} (fix CAPTIONS)")
        else:
            found[hits[0]] = option_line(name, caption)
    return cells, found, problems


def with_options(text: str, cells, found) -> str:
    for i in sorted(found, reverse=True):
        cell = cells[i]
        block = text[cell.start:cell.end]
        lines = block.split("\n")
        n = 0
        while n < len(lines) and lines[n].startswith(":"):
            n += 1
        opts = [ln for ln in lines[:n] if not OPTION.match(ln)]
        opts.append(found[i])
        text = (text[:cell.start] + "\n".join(opts + lines[n:])
                + text[cell.end:])
    return text


def image_cells(chapter: str) -> list[int] | None:
    nb_path = Paths.BOOK / f"{chapter}.ipynb"
    if not nb_path.exists():
        return None
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    return [i for i, c in enumerate(code) if any(
        k.startswith("image/") for o in c.outputs for k in o.get("data", {}))]


def problems() -> list[str]:
    have = {p.stem for p in Paths.CHAPTERS.glob("*.md")}
    out = [f"{c}: CAPTIONS names a chapter that does not exist (move its "
           "entries)" for c in CAPTIONS if c not in have]
    for path in sorted(Paths.CHAPTERS.glob("*.md")):
        chapter, text = path.stem, path.read_text(encoding="utf-8")
        cells, found, bad = resolve(chapter, text)
        out += bad
        if with_options(text, cells, found) != text:
            out.append(f"{chapter}: captions not applied "
                       "(run tools/figure_captions.py apply)")
        images = image_cells(chapter) or []
        for i in images:
            if i < len(cells) and i not in found:
                first = (cells[i].body.splitlines() or [""])[0]
                out.append(f"{chapter}: the figure drawn by {first!r} has no "
                           "caption in tools/figure_captions.py")
    return out


def main(argv: list[str] | None = None) -> int:
    cmd = (argv if argv is not None else sys.argv[1:] or ["check"])[0]
    if cmd == "apply":
        changed = []
        for chapter in CAPTIONS:
            path = Paths.CHAPTERS / f"{chapter}.md"
            text = path.read_text(encoding="utf-8")
            cells, found, bad = resolve(chapter, text)
            if bad:
                raise SystemExit("\n".join(bad))
            new = with_options(text, cells, found)
            if new != text:
                path.write_text(new, encoding="utf-8")
                changed.append(chapter)
        print("captions set in: " + (", ".join(changed) or "nothing"))
        return 0
    found = problems()
    print("\n".join(found) or "every figure has its caption")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
