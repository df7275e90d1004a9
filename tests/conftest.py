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
