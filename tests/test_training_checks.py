"""Tests for transformer.training_checks (chapter "Training", section "The
two checks, as functions"): E10 and E13 as the runner calls them."""
from transformer.training_checks import (overfit_config, shuffled_config,
                                         tiny_model_config)
from transformer.training import PRESETS


def test_e13_verdict_bands():
    """The decision E13 and tools/failure_tests.py share: a pass inside
    E13_BAND, caught more than E13_CAUGHT away from zero on either side."""
    from transformer.training_checks import E13_BAND, E13_CAUGHT, e13_verdict
    assert E13_BAND[0] < 0 < E13_BAND[1] < E13_CAUGHT
    assert e13_verdict(0.0) == "pass"
    assert e13_verdict(E13_BAND[0]) == e13_verdict(E13_BAND[1]) == "pass"
    assert e13_verdict(-E13_CAUGHT - 1e-9) == "leak"
    assert e13_verdict(E13_CAUGHT + 1e-9) == "misfit"
    assert e13_verdict(-E13_CAUGHT) == "unclear"
    assert e13_verdict((E13_BAND[1] + E13_CAUGHT) / 2) == "unclear"


def test_recipes_and_the_tiny_shape_come_from_the_preset():
    """tiny_model_config reads the tiny preset's shape (not a typed copy),
    and a smoke run narrows only the width, depth and heads."""
    want = PRESETS["tiny"][0]
    got = tiny_model_config()
    assert all(getattr(got, k) == v for k, v in want.items())
    smoke = tiny_model_config(True, block_size=40)
    assert (smoke.n_layer, smoke.n_embd, smoke.n_head) == (1, 32, 2)
    assert smoke.block_size == 40 and smoke.vocab_size == want["vocab_size"]
    assert overfit_config(300).lr == overfit_config(300).min_lr  # constant
    assert shuffled_config(200, eval_interval=20).eval_interval == 20
