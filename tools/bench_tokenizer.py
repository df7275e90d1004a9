"""Measurements for chapter "Tokenization: byte-level BPE".

    .venv/bin/python tools/bench_tokenizer.py [--quick]

Writes raw JSON under results/tokenizer/:
  compression.json  bytes/token and tokens/line on the training split and on
                    held-out text, vocabulary 256..8192, with training times;
  benchmark.json    side by side, interleaved (A, B, C, A, B, C, ...):
                    training on the first 1 MB at vocabulary 4096 and 512
                    (this package, Hugging Face `tokenizers`, the chapter's
                    teaching version at 512 only), and encoding the whole
                    corpus (this package, `tiktoken` and `tokenizers` built
                    from the same merges); every raw time, wall and CPU.
  real_vocab.json   the vocabularies of real models, read from tiktoken rank
                    files: merge recovery time, and cold-cache encoding of
                    the corpus against tiktoken built from the same file, at
                    1,024 ids (trained here, written with save_tiktoken),
                    50,257 (GPT-2, r50k_base) and 100,256 (GPT-4,
                    cl100k_base); ids checked identical every round.

    --ranks-dir DIR   where r50k_base.tiktoken and cl100k_base.tiktoken are
                      (default: $TIKTOKEN_RANKS_DIR, else data/). None is
                      shipped with the book; a missing file is replaced by a
                      vocabulary of the same size trained on the corpus, and
                      the JSON says so.
    --sections        comma-separated subset of compression,benchmark,real

Everything runs on one thread: `tokenizers` gets RAYON_NUM_THREADS=1 (set
below, before it is imported), the others are single-threaded anyway. The
machine is shared, so os.getloadavg() is recorded before and after each
section; CPU times (time.process_time) are recorded next to wall times
because they are much less sensitive to other processes.

--quick shrinks every size (a smoke test of the script, not for the book).
"""
from __future__ import annotations

import os

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its pool

import cProfile
import hashlib
import tempfile
import io
import platform
import pstats
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import regex  # noqa: E402
import tiktoken  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa
from tokenizers import trainers  # noqa: E402
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

from transformer import BPETokenizer, load_corpus, train_val_split  # noqa
from transformer.bench import environment, write_json  # noqa: E402
from transformer.stats import bootstrap_ci  # noqa: E402
from transformer.tokenizer import END_OF_TEXT, GPT2_PATTERN  # noqa: E402
import literate  # noqa: E402
import oracles  # noqa: E402
from tool_cli import add_quick, parser  # noqa: E402

OUT = ROOT / "results" / "tokenizer"


# -- the chapter's teaching version (kept in sync with chapters/03_...md) ----
# the chapter's teaching version, loaded from its source (never copied)
bpe_train_teaching = literate.chapter_definition("03_tokenizer",
                                                 "bpe_train_teaching")


# -- helpers ------------------------------------------------------------------
def timed(fn):
    """(result, wall seconds, CPU seconds of this process)."""
    w0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - w0, time.process_time() - c0


def summary(xs, n_boot=2000, seed=0):
    """p50, p95, min, max and a 95% bootstrap interval on the median (the
    book's one bootstrap, transformer.stats.bootstrap_ci)."""
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return {"n": len(xs), "p50": statistics.median(xs), "p95": p95,
            "min": xs[0], "max": xs[-1],
            "p50_ci95": list(bootstrap_ci(xs, "median", n_boot=n_boot,
                                          seed=seed))}


def loadavg():
    return list(os.getloadavg())


def bytes_to_unicode():
    """GPT-2's printable stand-in character for each byte, as used by
    `tokenizers`' ByteLevel pre-tokenizer."""
    bs = (list(range(ord("!"), ord("~") + 1))
          + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def hf_train(text, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                 use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=0, show_progress=False,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer)
    return tok


def hf_from_ours(tok: BPETokenizer):
    """A `tokenizers` ByteLevel BPE with exactly our vocabulary and merges."""
    b2u = bytes_to_unicode()
    name = {i: "".join(b2u[x] for x in tok.vocab[i])
            for i in range(256 + len(tok.merges))}
    model = models.BPE(vocab={name[i]: i for i in name},
                       merges=[(name[a], name[b]) for a, b in tok.merges])
    hf = Tokenizer(model)
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                use_regex=True)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(list(tok.special_tokens))
    return hf


tiktoken_from_ours = oracles.tiktoken_of


def learned_tokens_hf(hf):
    u2b = {c: b for b, c in bytes_to_unicode().items()}
    vocab = hf.get_vocab()
    return {bytes(u2b[c] for c in s) for s, i in vocab.items()
            if s != END_OF_TEXT and len(s) > 1}


def profile_top(fn, n=10):
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stream = io.StringIO()
    stats = pstats.Stats(prof, stream=stream).sort_stats("tottime")
    rows = []
    for (file, line, func), (cc, nc, tt, ct, _) in sorted(
            stats.stats.items(), key=lambda kv: -kv[1][2])[:n]:
        rows.append({"function": f"{Path(file).name}:{line}({func})",
                     "calls": nc, "tottime_s": round(tt, 4),
                     "cumtime_s": round(ct, 4)})
    return rows


def meta(corpus):
    return {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "rayon_num_threads": os.environ["RAYON_NUM_THREADS"],
        "versions": {"tokenizers": tokenizers.__version__,
                     "tiktoken": tiktoken.__version__,
                     "regex": regex.__version__},
        "corpus_bytes": len(corpus.encode("utf-8")),
        "loadavg_start": loadavg(),
        "environment": environment(),
    }


# -- the three measurements ---------------------------------------------
def compression(corpus, sizes):
    train_text, val_text = train_val_split(corpus)
    n_lines = {"train": train_text.count("\n") + 1,
               "val": val_text.count("\n") + 1}
    n_bytes = {"train": len(train_text.encode()),
               "val": len(val_text.encode())}
    rows = []
    for V in sizes:
        load0 = loadavg()
        tok, wall, cpu = timed(lambda: BPETokenizer.train(
            train_text, V, special_tokens=()))
        row = {"vocab_size": V, "n_merges": len(tok.merges),
               "train_wall_s": wall, "train_cpu_s": cpu,
               "loadavg_before": load0}
        for split, text in (("train", train_text), ("val", val_text)):
            ids = tok.encode(text)
            assert tok.decode(ids) == text
            row[f"{split}_tokens"] = len(ids)
            row[f"{split}_bytes_per_token"] = n_bytes[split] / len(ids)
            row[f"{split}_tokens_per_line"] = len(ids) / n_lines[split]
        rows.append(row)
        print(f"V={V}: {wall:.1f} s, val {row['val_bytes_per_token']:.3f} "
              f"bytes/token", flush=True)
    return {"trained_on": "train split (first 90% of the corpus), whole",
            "special_tokens": [], "bytes": n_bytes, "lines": n_lines,
            "rows": rows}


def training_bench(text, sizes, repeats, teaching_repeats):
    out = {"text_bytes": len(text.encode()), "repeats": repeats,
           "teaching_repeats": teaching_repeats, "sizes": {}}
    for V in sizes:
        runs = {"ours": [], "tokenizers": []}
        if V in teaching_repeats:
            runs["teaching"] = []
        load0 = loadavg()
        ours = hf = None
        for r in range(repeats):
            ours, w, c = timed(lambda: BPETokenizer.train(text, V))
            runs["ours"].append({"wall_s": w, "cpu_s": c})
            hf, w, c = timed(lambda: hf_train(text, V))
            runs["tokenizers"].append({"wall_s": w, "cpu_s": c})
            if r < teaching_repeats.get(V, 0):
                merges, w, c = timed(lambda: bpe_train_teaching(
                    text, V - 1, GPT2_PATTERN))
                # one id fewer: ours spends the last one on <|endoftext|>
                assert merges == ours.merges, "teaching != incremental"
                runs["teaching"].append({"wall_s": w, "cpu_s": c})
            print(f"train V={V} round {r}: "
                  + ", ".join(f"{k} {v[-1]['wall_s']:.2f} s"
                              for k, v in runs.items() if len(v) > r),
                  flush=True)
        ours_tokens = {ours.vocab[i] for i in range(256, 256 + len(
            ours.merges))}
        hf_tokens = learned_tokens_hf(hf)
        out["sizes"][str(V)] = {
            "runs": runs,
            "summary": {k: {"wall_s": summary([x["wall_s"] for x in v]),
                            "cpu_s": summary([x["cpu_s"] for x in v])}
                        for k, v in runs.items()},
            "loadavg_before": load0, "loadavg_after": loadavg(),
            "ours_vocab_size": ours.vocab_size,
            "tokenizers_vocab_size": hf.get_vocab_size(),
            "learned_token_overlap": len(ours_tokens & hf_tokens)
            / len(ours_tokens),
        }
    return out


def encoding_bench(corpus, tok, repeats):
    enc = tiktoken_from_ours(tok)
    hf = hf_from_ours(tok)
    n_bytes = len(corpus.encode())
    runs = {"ours": [], "ours_warm_cache": [], "tiktoken": [],
            "tokenizers": []}
    load0 = loadavg()
    reference = None
    for r in range(repeats):
        fresh = BPETokenizer(tok.merges, tok.pattern,
                             tuple(tok.special_tokens))  # empty cache
        ids, w, c = timed(lambda: fresh.encode(corpus))
        runs["ours"].append({"wall_s": w, "cpu_s": c})
        ids_warm, w, c = timed(lambda: fresh.encode(corpus))
        runs["ours_warm_cache"].append({"wall_s": w, "cpu_s": c})
        ids_tt, w, c = timed(lambda: enc.encode_ordinary(corpus))
        runs["tiktoken"].append({"wall_s": w, "cpu_s": c})
        ids_hf, w, c = timed(lambda: hf.encode(
            corpus, add_special_tokens=False).ids)
        runs["tokenizers"].append({"wall_s": w, "cpu_s": c})
        reference = ids
        same = {"ours_warm_cache": ids_warm == ids,
                "tiktoken": ids_tt == ids, "tokenizers": ids_hf == ids}
        print(f"encode round {r}: " + ", ".join(
            f"{k} {v[-1]['wall_s']:.2f} s" for k, v in runs.items())
            + f"; identical ids {same}", flush=True)
    return {
        "text_bytes": n_bytes, "n_tokens": len(reference),
        "tokenizer": repr(tok), "repeats": repeats, "runs": runs,
        "identical_ids": same,
        "summary": {k: {"wall_s": summary([x["wall_s"] for x in v]),
                        "cpu_s": summary([x["cpu_s"] for x in v]),
                        "MB_per_s_at_p50_wall": n_bytes / 1e6 / summary(
                            [x["wall_s"] for x in v])["p50"]}
                    for k, v in runs.items()},
        "loadavg_before": load0, "loadavg_after": loadavg(),
    }


# -- real vocabularies ------------------------------------------------------
# tiktoken's own patterns for its r50k_base (GPT-2) and cl100k_base (GPT-4)
R50K_PATTERN = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++"""
                r"""| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""")
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++"""
                  r"""|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$"""
                  r"""|\s*[\r\n]|\s+(?!\S)|\s""")
# the SHA-256 tiktoken checks its downloads against (tiktoken_ext)
PUBLISHED_SHA256 = {
    "r50k_base": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9"
                 "838dd930",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bc"
                   "ffe865b2a7",
}


def rank_file(name, size, pattern, ranks_dir, corpus, tmp):
    """(path, provenance): the user's rank file if present, else one this
    script trains on the corpus and writes with save_tiktoken."""
    path = ranks_dir / f"{name}.tiktoken" if name else None
    if path is not None and path.is_file():
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        return path, {"source": f"{name}.tiktoken, the user's file",
                      "sha256": sha,
                      "published_sha256": sha == PUBLISHED_SHA256[name]}
    tok = BPETokenizer.train(corpus, size, pattern, special_tokens=())
    path = Path(tmp) / f"trained-{size}.tiktoken"
    tok.save_tiktoken(path)
    return path, {"source": f"trained on the corpus here ({len(tok.merges)}"
                            f" merges), written with save_tiktoken"}


def ratio_summary(runs_ours, runs_theirs, key):
    """Per-round throughput ratios ours/theirs = theirs time / ours time."""
    ratios = [t[key] / o[key] for o, t in zip(runs_ours, runs_theirs)]
    return {"ratios": ratios, **summary(ratios)}


def real_vocab_bench(corpus, ranks_dir, repeats, recover_repeats):
    specs = [("1024", None, 1024, GPT2_PATTERN),
             ("50k", "r50k_base", 50257, R50K_PATTERN),
             ("100k", "cl100k_base", 100256, CL100K_PATTERN)]
    out = {"text_bytes": len(corpus.encode()), "repeats": repeats,
           "ranks_dir": str(ranks_dir), "vocabularies": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, size, pattern in specs:
            load0 = loadavg()
            path, provenance = rank_file(name, size, pattern, ranks_dir,
                                         corpus[:1_000_000] if label ==
                                         "1024" else corpus, tmp)
            recover = []
            for _ in range(recover_repeats):
                tok, w, c = timed(lambda: BPETokenizer.from_tiktoken(
                    path, pattern))
                recover.append({"wall_s": w, "cpu_s": c})
            ranks = load_tiktoken_bpe(str(path))
            enc = tiktoken.Encoding(f"file-{label}", pat_str=pattern,
                                    mergeable_ranks=ranks,
                                    special_tokens={})
            runs = {"ours": [], "tiktoken": [], "ours_regex_only": []}
            identical = []
            for r in range(repeats):
                order = ["ours", "tiktoken", "ours_regex_only"]
                order = order[r % 3:] + order[:r % 3]  # rotate A, B, C
                ids = {}
                for who in order:
                    if who == "tiktoken":
                        fn = lambda: enc.encode_ordinary(corpus)  # noqa
                    else:
                        fresh = BPETokenizer(tok.merges, pattern, (),
                                             tok.byte_ids)  # empty cache
                        if who == "ours_regex_only":
                            fresh.pre_tokenize.ascii_twin = None
                        fn = fresh.encode
                        fn = (lambda f: lambda: f(corpus))(fn)
                    ids[who], w, c = timed(fn)
                    runs[who].append({"wall_s": w, "cpu_s": c})
                identical.append(ids["ours"] == ids["tiktoken"]
                                 == ids["ours_regex_only"])
                print(f"{label} round {r}: " + ", ".join(
                    f"{k} {v[-1]['wall_s']:.2f} s" for k, v in
                    runs.items()) + f"; identical {identical[-1]}",
                    flush=True)
            out["vocabularies"][label] = {
                **provenance, "pattern": pattern, "n_ranks": len(ranks),
                "n_merges": len(tok.merges),
                "byte_order_is_identity": tok.byte_ids == tuple(range(256)),
                "n_tokens": len(ids["ours"]),
                "identical_ids_every_round": all(identical),
                "ascii_twin": tok.pre_tokenize.ascii_twin is not None,
                "recover": {"runs": recover,
                            "wall_s": summary([x["wall_s"] for x in
                                               recover]),
                            "cpu_s": summary([x["cpu_s"] for x in recover])},
                "runs": runs,
                "throughput_vs_tiktoken": {
                    who: {k: ratio_summary(runs[who], runs["tiktoken"], k)
                          for k in ("wall_s", "cpu_s")}
                    for who in ("ours", "ours_regex_only")},
                "loadavg_before": load0, "loadavg_after": loadavg(),
            }
    return out


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    add_quick(p, help="a smoke test: a 300 kB corpus, fewer sizes and "
                      "repeats, the records written as NAME_quick.json")
    p.add_argument("--ranks-dir", type=Path, default=Path(
        os.environ.get("TIKTOKEN_RANKS_DIR", ROOT / "data")))
    p.add_argument("--sections", default="compression,benchmark,real")
    args = p.parse_args(argv)
    sections = set(args.sections.split(","))
    corpus = load_corpus()
    if args.quick:
        corpus = corpus[:300_000]
        sizes, bench_text, repeats = [256, 512, 1024], corpus[:100_000], 2
        teaching = {512: 1}
    else:
        sizes, bench_text, repeats = ([256, 512, 1024, 2048, 4096, 8192],
                                      corpus[:1_000_000], 5)
        teaching = {512: 3}
    OUT.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if args.quick else ""

    if "compression" in sections:
        info = meta(corpus)
        result = {"meta": info, "compression": compression(corpus, sizes)}
        result["meta"]["loadavg_end"] = loadavg()
        write_json(result, OUT / f"compression{suffix}.json")

    if "benchmark" in sections:
        info = meta(corpus)
        bench = {"meta": info}
        bench["training"] = training_bench(bench_text, [4096, 512], repeats,
                                           teaching)
        tok = BPETokenizer.train(bench_text, 4096)
        bench["encoding"] = encoding_bench(corpus, tok, repeats)
        bench["profile"] = {
            "train_4096": profile_top(lambda: BPETokenizer.train(bench_text,
                                                                 4096)),
            "encode_cold": profile_top(lambda: BPETokenizer(
                tok.merges, tok.pattern, tuple(tok.special_tokens)).encode(
                    corpus)),
        }
        bench["meta"]["loadavg_end"] = loadavg()
        write_json(bench, OUT / f"benchmark{suffix}.json")

    if "real" in sections:
        info = meta(corpus)
        real = {"meta": info, **real_vocab_bench(
            corpus, args.ranks_dir, 3 if args.quick else 9,
            1 if args.quick else 3)}
        real["meta"]["loadavg_end"] = loadavg()
        write_json(real, OUT / f"real_vocab{suffix}.json")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
