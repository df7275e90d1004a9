"""Fixtures shared by several test files."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Toy models are all per-call overhead: one thread avoids spin-waits
    on a shared machine. Restored after each test."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_study_inputs(n_tokens: int, eval_batches: int):
    """(ids, model, run) of the long-context studies' smoke shape: random
    tokens over 40 ids, a one-layer width-16 model at T = 16, two steps.
    Used by the sliding-window and RoPE-base tests."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (n_tokens,), generator=g)
    model = {"vocab_size": 40, "n_embd": 16, "n_head": 2, "n_layer": 1,
             "block_size": 16}
    run = {"steps": 2, "batch_size": 2, "warmup_steps": 1,
           "eval_interval": 2, "eval_batches": eval_batches,
           "eval_seed": 1234, "checkpoint_interval": 0}
    return ids, model, run
