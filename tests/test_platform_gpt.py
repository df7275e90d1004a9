"""The platform-kernel reference in tools/ (PyTorch's fused modules and SDPA)
computes the book's model: same logits and loss from the same weights, so
the training benchmark compares speed of one architecture."""
import pytest
import torch

from platform_gpt import PlatformGPT  # tools/, on sys.path via conftest.py
from transformer import GPT, GPTConfig


@pytest.mark.parametrize("fused", [False, True])
def test_platform_reference_matches_the_book_model(fused):
    cfg = GPTConfig(vocab_size=61, block_size=24, n_layer=2, n_head=4,
                    n_embd=32, fused=fused)
    torch.manual_seed(0)
    ours = GPT(cfg).eval()
    ref = PlatformGPT(61, 24, 2, 4, 32).load_from(ours).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 61, (3, 24), generator=g)  # (B, T)
    y = torch.randint(0, 61, (3, 24), generator=g)  # (B, T)
    with torch.no_grad():
        a, la = ours(x, y)
        b, lb = ref(x, y)
    torch.testing.assert_close(b, a, rtol=0, atol=2e-5)
    torch.testing.assert_close(lb, la, rtol=0, atol=2e-6)
    n_ours = sum(p.numel() for p in ours.parameters())
    assert sum(p.numel() for p in ref.parameters()) == n_ours
