"""Speculative decoding measured: acceptance, tokens per call, cost ratio, speed-up.

    python tools/speculative_bench.py [--temperature T] [--rounds R]

Writes results/speculative/speculative.json (and trains, once, the small draft
results/speculative/draft_gpt.pt). The prediction is results/speculative/
DECLARATION.md, written before the first run. One thread; timing rounds of plain
and speculative decoding interleaved. Chapter "Speculative decoding".
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402

from transformer.baseline import token_stream  # noqa: E402
from transformer.bench import environment  # noqa: E402
from transformer.kv_cache import generate, make_caches  # noqa: E402
from transformer.model import GPT, GPTConfig  # noqa: E402
from transformer.speculative import (bigram_draft,  # noqa: E402
                                     decoding_probs, speculative_generate,
                                     verify_round)
from transformer.stats import bootstrap_ci  # noqa: E402
from transformer.training import configs_from, init_model, train  # noqa

OUT = ROOT / "results" / "speculative"
DRAFT = dict(n_layer=1, n_head=2, n_embd=64)  # overrides of the tiny preset
GAMMAS = (1, 2, 4, 8)
PROMPTS, PROMPT_LEN, NEW = 8, 16, 48


def load_target() -> GPT:
    ckpt = torch.load(ROOT / "results/sampling/tiny_gpt.pt")
    model = GPT(GPTConfig(**ckpt["config"])).eval()
    model.load_state_dict({k: v.float() for k, v in
                           ckpt["state_dict"].items()})
    return model


def trained_draft(train_ids, val_ids) -> tuple[GPT, dict]:
    path = OUT / "draft_gpt.pt"
    model_cfg, train_cfg = configs_from("tiny", DRAFT)
    if path.exists():
        saved = torch.load(path)
        model = GPT(GPTConfig(**saved["config"])).eval()
        model.load_state_dict({k: v.float() for k, v in
                               saved["state_dict"].items()})
        return model, saved["info"]
    model = init_model(model_cfg, seed=0)
    start = time.process_time()
    result = train(model, train_ids, val_ids, train_cfg)
    info = {"steps": train_cfg.steps, "cpu_s": round(time.process_time()
                                                     - start, 1),
            "val_loss": round(result["val_loss"][-1], 4)}
    torch.save({"config": dataclasses.asdict(model_cfg),
        "state_dict": {k: v.half() for k, v in
                       model.state_dict().items()},
        "info": info}, path)
    model.load_state_dict({k: v.half().float() for k, v in
                           model.state_dict().items()})
    return model.eval(), info


def median_time(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


@torch.no_grad()
def step_costs(model, prompt, gamma: int) -> tuple[float, float]:
    """(seconds of one cached decode step, of one (gamma+1)-position call)."""
    T0 = prompt.shape[1]

    def call(width):
        caches = make_caches(model, 1, T0 + width)
        model(prompt, caches=caches)
        extra = prompt[:, :width]
        return lambda: ([setattr(c, "length", T0) for c in caches],
                        model(extra, start_pos=T0, caches=caches))
    return median_time(call(1), 60), median_time(call(gamma + 1), 60)


def rule_cost(V: int, gamma: int, temperature: float) -> float:
    """Seconds of one round's bookkeeping without any model call: the
    gamma + 1 processed distributions, gamma draws, the rule, the cat."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(gamma + 1, V, generator=g)
    seq = torch.zeros(1, 64, dtype=torch.int64)

    def once():
        q = [decoding_probs(z[i], temperature) for i in range(gamma)]
        d = [torch.multinomial(x, 1, generator=g) for x in q]
        p = decoding_probs(z, temperature)
        verify_round(p, torch.stack(q), torch.cat(d), g)
        torch.cat([seq, *[x[None] for x in d]], 1)
    return median_time(once, 100)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    target = load_target()
    _, train_ids, val_ids = token_stream(target.config.vocab_size)
    drafts = {"bigram": bigram_draft(train_ids, target.config.vocab_size)}
    drafts["gpt"], info = trained_draft(train_ids, val_ids)
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(val_ids) - PROMPT_LEN, (PROMPTS,),
                           generator=g)
    prompts = torch.stack([val_ids[s:s + PROMPT_LEN] for s in starts])
    t_target = {gm: step_costs(target, prompts[:1], gm) for gm in GAMMAS}
    arms = {}
    for name, draft in drafts.items():
        arms[name] = {}
        for gamma in GAMMAS:
            rounds = []
            speculative_generate(target, draft, prompts, NEW, gamma=gamma,
                                 temperature=args.temperature,
                                 generator=torch.Generator().manual_seed(1),
                                 rounds=rounds)
            proposed = sum(r[0] for r in rounds)
            accepted = sum(r[1] for r in rounds)
            # positions tried: every accepted one, plus the rejected one
            tried = accepted + sum(r[1] < r[0] for r in rounds)
            calls = len(rounds) + 0  # one target call per round
            a = sum(r[2] * r[0] for r in rounds) / proposed
            step, wide = t_target[gamma]
            if name == "gpt":
                d_step = step_costs(draft, prompts[:1], gamma)[0]
            else:
                d_step = median_time(lambda: draft(prompts[:1, :NEW]), 60)
            c, v = d_step / step, wide / step
            o = rule_cost(target.config.vocab_size, gamma,
                          args.temperature) / step
            tokens = (1 - a ** (gamma + 1)) / (1 - a)
            ratios = []
            for r in range(args.rounds):  # interleaved, order alternating
                pair = []
                for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                    gen = torch.Generator().manual_seed(100 + r)
                    t = time.perf_counter()
                    one = prompts[r % PROMPTS][None]  # (1, T0): B = 1
                    if which == 0:
                        generate(target, one, NEW,
                                 temperature=args.temperature, generator=gen)
                    else:
                        speculative_generate(
                            target, draft, one, NEW, gamma=gamma,
                            temperature=args.temperature, generator=gen)
                    pair.append((which, time.perf_counter() - t))
                plain = next(t for w, t in pair if w == 0)
                spec = next(t for w, t in pair if w == 1)
                ratios.append(plain / spec)
            lo, hi = bootstrap_ci(ratios, statistic="median")
            arms[name][str(gamma)] = {
                "alpha_observed": accepted / tried,
                "proposed": proposed, "accepted": accepted,
                "alpha_logits": a,
                "tokens_per_call": PROMPTS * NEW / calls,
                "tokens_per_call_predicted": tokens,
                "c": c, "v_gamma": v, "rule_over_step": o,
                "speedup_predicted_with_rule": tokens / (gamma * c + v + o),
                "speedup": [statistics.median(ratios), lo, hi],
                "speedup_predicted": tokens / (gamma * c + v),
                "speedup_predicted_leviathan": tokens / (gamma * c + 1),
                "rounds": len(rounds)}
            print(name, gamma, {k: (round(x, 3) if isinstance(x, float)
                                    else x) for k, x in
                                arms[name][str(gamma)].items()}, flush=True)
    n_params = lambda m: sum(p.numel() for p in m.parameters())  # noqa
    record = {
        "temperature": args.temperature, "tokens": PROMPTS * NEW,
        "target": {"path": "results/sampling/tiny_gpt.pt",
                   "params": n_params(target)},
        "drafts": {"bigram": {"params": n_params(drafts["bigram"]),
                              "alpha_smoothing": 0.1},
                   "gpt": {"path": "results/speculative/draft_gpt.pt",
                           "params": n_params(drafts["gpt"]), **info,
                           "overrides_of_tiny": DRAFT}},
        "arms": arms,
        "environment": {**environment(), "load_avg": os.getloadavg()},
    }
    name = "speculative.json" if args.temperature == 1.0 else \
        f"speculative-t{args.temperature:g}.json"
    (OUT / name).write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", OUT / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
