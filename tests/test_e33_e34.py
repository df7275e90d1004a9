"""E33 and E34 through the runner (chapters "Speculative decoding" and
"RoPE's base and conventions", appendix "The experiments, declared"): the
measurements' own checks, and the committed records against their
declarations."""
import json
import math
from pathlib import Path

import pytest

from conftest import tiny_study_inputs
from transformer.ablations import E34_DIFFS, E34_SLUG, EXPERIMENTS
from transformer.experiments import record_matches
from transformer.rope_scaling import (ROPE_ARMS, copy_gain, ntk_base,
                                      position_spans, rope_base_study)
from transformer.speculative import expected_tokens, validation_prompts

ROOT = Path(__file__).resolve().parents[1] / "results" / "experiments"
# probes whose records land seed by seed: every record there must already
# be right, the set need not be complete (an id leaves once it is)
IN_PROGRESS: set = set()


def test_expected_tokens_is_the_closed_form():
    for a in (0.0, 0.3, 0.75, 0.99):
        for gamma in range(1, 9):
            closed = (1 - a ** (gamma + 1)) / (1 - a)
            assert math.isclose(expected_tokens(a, gamma), closed,
                                rel_tol=1e-12)
    assert expected_tokens(1.0, 4) == 5  # every proposal accepted


def test_validation_prompts_are_windows_of_the_split():
    import torch
    ids = torch.arange(1000)
    p = validation_prompts(ids, 8, 16, seed=3)
    assert p.shape == (8, 16) and p.dtype == torch.int64
    assert torch.equal(p[:, 1:] - p[:, :-1], torch.ones(8, 15,
                                                        dtype=torch.int64))
    assert torch.equal(p, validation_prompts(ids, 8, 16, seed=3))


def test_position_spans_and_bad_input():
    xs = [1.0] * 4 + [2.0] * 4 + [4.0] * 8
    assert position_spans(xs, 4) == {"in": 1.0, "mid": 2.0, "far": 4.0}
    with pytest.raises(ValueError, match="loss_per_position"):
        position_spans([1.0] * 8, 4)


def _tiny_study(arms=ROPE_ARMS):
    ids, model, run = tiny_study_inputs(4000, eval_batches=1)
    return rope_base_study(0, (None, ids, ids), model, run, arms,
                           distances=(4, 8, 16, 32), span=4)


def test_rope_base_study_arms():
    """The NTK arm is the trained base-1e4 model at ntk_base, with its
    training curve; the mixed arm's keys use the other layout; every arm
    is scored at four times the trained length; an NTK arm before the
    model it rescales is refused."""
    out = _tiny_study()
    assert list(out) == list(ROPE_ARMS)
    ntk, b4 = out["base 1e4 + NTK"], out["base 1e4"]
    assert ntk["train_loss"] == b4["train_loss"]
    assert ntk["rope_base_eval"] == ntk_base(1e4, 4, 8)
    assert out["mixed"]["rope_layout_k"] == "halves"
    assert b4["rope_layout_k"] == "interleaved"
    for rec in out.values():
        assert len(rec["loss_per_position"]) == 64
        assert list(rec["copy_gain"]) == ["4", "8", "16", "32"]
    with pytest.raises(ValueError, match="arms"):
        _tiny_study({"base 1e4 + NTK": {"ntk_of": "base 1e4"}})


def test_copy_gain_refuses_distances_outside_the_window():
    import torch
    from transformer.model import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=1,
                          n_head=2, n_embd=16, pos_encoding="rope"))
    ids = torch.randint(0, 40, (500,))
    for bad in ((2,), (61,)):  # shorter than the span; past the start
        with pytest.raises(ValueError, match="distances"):
            copy_gain(model, ids, 64, bad, span=4)


def _records(pid):
    return [json.loads(p.read_text())
            for p in sorted((ROOT / pid).glob("*.json"))]


@pytest.mark.parametrize("pid", ["E33", "E34"])
def test_committed_records(pid):
    """Each committed record is one the runner would keep (its
    measurement's configuration), from one clean commit, not a smoke run,
    with every metric of its table finite; the set is complete unless the
    probe is still running."""
    probe, recs = EXPERIMENTS[pid], _records(pid)
    seeds = sorted(r["seed"] for r in recs)
    if pid in IN_PROGRESS:
        assert set(seeds) <= set(probe.seeds)
    else:
        assert seeds == list(probe.seeds)
    commits = {r["git_commit"] for r in recs}
    assert len(commits) <= 1
    for r in recs:
        assert len(r["git_commit"]) == 40 and "+" not in r["git_commit"]
        assert r["smoke"] is False and r["experiment"] == pid
        assert record_matches(r, probe, None, "-", r["seed"])
        for metric in probe.metrics:
            assert math.isfinite(r["final"][metric]), metric


def test_committed_e34_metrics_come_from_its_raw_curves():
    for r in _records("E34"):
        assert list(r["arms"]) == list(ROPE_ARMS)
        T = r["byte_model"]["block_size"]
        for name, arm in r["arms"].items():
            assert len(arm["loss_per_position"]) == 4 * T
            spans = position_spans(arm["loss_per_position"], T)
            for k, v in spans.items():
                assert r["final"][f"{E34_SLUG[name]}_{k}"] == v
        for metric, (a, b, where) in E34_DIFFS.items():
            assert r["final"][metric] == (r["final"][f"{a}_{where}"]
                                          - r["final"][f"{b}_{where}"])


def test_committed_e33_holds_both_temperatures():
    for r in _records("E33"):
        assert set(r["runs"]) == {"1", "0"}
        for t, run in r["runs"].items():
            assert run["temperature"] == float(t)
            assert set(run["arms"]) == {"bigram", "gpt"}
            for arm in run["arms"].values():
                assert list(arm) == ["1", "2", "4", "8"]
