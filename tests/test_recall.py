"""E15's associative-recall task, its window MLP and its matched sizes
(chapter "Ablations", section "Probe E15")."""
import math

import pytest
import torch

from transformer.ablations import EXPERIMENTS
from transformer.recall import (RECALL_MATCH, RECALL_TASK, WindowMLP,
                                evaluate_recall, recall_batch,
                                recall_fraction_outside, recall_models,
                                window_mlp_params)


def test_the_target_is_the_value_paired_with_the_key_earlier():
    g = torch.Generator().manual_seed(0)
    x, values, recalled, back = recall_batch(64, g)
    B, P = values.shape
    K = RECALL_TASK["n_keys"]
    keys = x[:, 0::2]  # (B, P)
    assert torch.equal(x[:, 1::2], values)
    assert bool((keys < K).all()) and bool((values >= K).all())
    for b in range(B):
        for t in range(P):
            earlier = [s for s in range(t) if keys[b, s] == keys[b, t]]
            assert bool(recalled[b, t]) == bool(earlier)
            if earlier:
                s = earlier[-1]
                assert int(back[b, t]) == t - s
                # the target is the value that followed the earlier key
                assert int(values[b, t]) == int(x[b, 2 * s + 1])
            else:
                assert int(back[b, t]) == 0


def test_the_fraction_outside_the_window_matches_its_derivation():
    g = torch.Generator().manual_seed(1)
    _, _, recalled, back = recall_batch(20_000, g)
    W = RECALL_TASK["window"]
    measured = (back[recalled] > (W - 1) // 2).float().mean().item()
    derived = recall_fraction_outside(W, RECALL_TASK["n_pairs"],
                                      RECALL_TASK["n_keys"])
    # about 114,000 recalled positions: a standard error near 0.0014
    assert abs(measured - derived) < 0.01
    assert recall_fraction_outside(2 * RECALL_TASK["n_pairs"] + 1,
                                   RECALL_TASK["n_pairs"],
                                   RECALL_TASK["n_keys"]) == 0.0


def test_the_arms_have_matched_parameter_counts():
    arms = recall_models(0)
    n = {k: sum(p.numel() for p in m.parameters()) for k, m in arms.items()}
    assert n["attn"] == arms["attn"].n_params()
    for name in ("mlp", "full"):
        assert abs(n[name] - n["attn"]) <= RECALL_MATCH * n["attn"], n
        m = arms[name]
        assert n[name] == window_mlp_params(
            m.vocab_size, m.window, m.wte.embedding_dim,
            m.layers[0].out_features, len(m.layers))
    assert arms["mlp"].window == RECALL_TASK["window"]
    assert arms["full"].window == 2 * RECALL_TASK["n_pairs"]


def test_the_window_mlp_ignores_tokens_outside_its_window():
    torch.manual_seed(0)
    model = WindowMLP(32, 5, 8, 16).eval()
    x = torch.randint(0, 32, (4, 20))  # (B, T)
    y = x.clone()
    y[:, :10] = torch.randint(0, 32, (4, 10))  # (B, T): change t < 10
    with torch.no_grad():
        a, _ = model(x)  # (B, T, V)
        b, _ = model(y)  # (B, T, V)
    # positions 14.. see only tokens 10..: bit-identical logits
    assert torch.equal(a[:, 14:], b[:, 14:])
    assert not torch.equal(a[:, 10:14], b[:, 10:14])  # these did see them


def test_window_mlp_rejects_bad_sizes():
    with pytest.raises(ValueError, match="window"):
        WindowMLP(32, 0, 8, 16)
    with pytest.raises(ValueError, match="n_seq"):
        recall_batch(0, torch.Generator())


def test_evaluate_recall_scores_a_perfect_lookup_as_one():
    class Oracle(torch.nn.Module):
        """Looks the value up from the sequence itself."""
        def forward(self, idx):
            B, T = idx.shape
            V = RECALL_TASK["n_keys"] + RECALL_TASK["n_values"]
            logits = torch.zeros(B, T, V)  # (B, T, V)
            for b in range(B):
                for t in range(0, T, 2):
                    for s in range(t - 2, -1, -2):
                        if idx[b, s] == idx[b, t]:
                            logits[b, t, idx[b, s + 1]] = 20.0
                            break
            return logits, None

    ev = evaluate_recall(Oracle(), 16, RECALL_TASK["window"])
    assert ev["acc"] == 1.0 and ev["acc_in"] == 1.0 and ev["acc_out"] == 1.0
    assert 0.0 <= ev["loss"] < 1e-6  # 31 exp(-20): 6.4e-8


def test_e15_smoke_record_carries_every_table_metric(tmp_path):
    from transformer.experiments import run_probe
    rec = run_probe(EXPERIMENTS["E15"].smoke(), 0)
    for m in EXPERIMENTS["E15"].metrics:
        assert math.isfinite(rec["final"][m]), m
    assert rec["final"]["chance"] == 1 / RECALL_TASK["n_values"]
