"""Train a very small GPT for the sampling chapter's text samples.

A stand-in until the training chapter's model exists: a BPE tokenizer with
a vocabulary of 1024, trained on the corpus, and a 4-layer, width-128 GPT
trained for a fixed number of steps (about five minutes with one thread
on a busy 2-core machine). Writes
results/sampling/tiny_gpt.pt (weights in float16, under 5 MB),
results/sampling/tokenizer.json and results/sampling/train_tiny.json.

Usage: .venv/bin/python tools/train_tiny.py [--steps 400]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from transformer import (AdamW, BPETokenizer, GPTConfig,  # noqa: E402
                         load_corpus, lr_at, train_val_split)
from transformer.model import GPT  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "results" / "sampling"
CONFIG = dict(vocab_size=1024, block_size=256, n_layer=4, n_head=4,
              n_embd=128)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--tok-chars", type=int, default=400_000,
                    help="characters of the corpus the tokenizer learns on")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a small model: more threads only spin
    t0 = time.perf_counter()
    text = load_corpus()
    train_text, val_text = train_val_split(text)
    tok = BPETokenizer.train(train_text[:args.tok_chars], 1024)
    t_tok = time.perf_counter() - t0
    print(f"tokenizer trained in {t_tok:.0f} s", flush=True)
    ids = torch.tensor(tok.encode(train_text), dtype=torch.int64)  # (N,)
    val = torch.tensor(tok.encode(val_text), dtype=torch.int64)  # (N,)
    t_enc = time.perf_counter() - t0 - t_tok
    model = GPT(GPTConfig(**CONFIG))
    opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    losses = []
    t1 = time.perf_counter()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, 3e-3, 30, args.steps, min_lr=3e-4)
        i = torch.randint(0, len(ids) - args.seq - 1, (args.batch,),
                          generator=g)  # (B,)
        off = torch.arange(args.seq + 1)  # (T + 1,)
        chunk = ids[i[:, None] + off]  # (B, T + 1)
        _, loss = model(chunk[:, :-1], chunk[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 25 == 0:
            print(f"step {step}: loss {loss.item():.3f} "
                  f"({time.perf_counter() - t1:.0f} s)", flush=True)
    t_train = time.perf_counter() - t1
    model.eval()
    with torch.no_grad():
        n = (len(val) - 1) // args.seq
        x = val[:n * args.seq].view(n, args.seq)  # (n, T)
        y = val[1:n * args.seq + 1].view(n, args.seq)  # (n, T)
        _, val_loss = model(x[:64], y[:64])
    OUT.mkdir(parents=True, exist_ok=True)
    state = {k: v.half() for k, v in model.state_dict().items()}
    torch.save({"config": CONFIG, "state_dict": state}, OUT / "tiny_gpt.pt")
    tok.save(OUT / "tokenizer.json")
    record = {"config": CONFIG, "steps": args.steps, "batch": args.batch,
              "seq": args.seq, "tokenizer_chars": args.tok_chars,
              "train_chars": len(train_text), "train_tokens": len(ids),
              "chars_per_token_val": len(val_text) / len(val),
              "val_loss": val_loss.item(), "ln_V": math.log(1024),
              "losses": losses, "seconds_tokenizer": t_tok,
              "seconds_encode": t_enc, "seconds_train": t_train}
    (OUT / "train_tiny.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"val loss {val_loss.item():.3f} nats; tokenizer {t_tok:.0f} s, "
          f"encode {t_enc:.0f} s, train {t_train:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
