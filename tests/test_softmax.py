"""Chapter "Softmax, temperature and calibration": PyTorch is the oracle."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer import cross_entropy, log_softmax, softmax

ATOL = 1e-6


def logits(seed, shape=(3, 5, 17), scale=5.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype) * scale


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("temperature", [0.1, 1.0, 3.0])
def test_matches_torch(seed, temperature):
    z = logits(seed)
    p = softmax(z, temperature=temperature)
    torch.testing.assert_close(p, torch.softmax(z / temperature, dim=-1),
                               rtol=0, atol=ATOL)
    torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]),
                               rtol=0, atol=1e-5)
    assert p.dtype == z.dtype and p.shape == z.shape


def test_extreme_logits():
    z = torch.tensor([[1e4, -1e4, 0.0], [1e4, 1e4, 1e4], [-1e4, -1e4, -1e4]])
    p = softmax(z)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p, torch.tensor(
        [[1.0, 0.0, 0.0], [1 / 3] * 3, [1 / 3] * 3]), rtol=0, atol=ATOL)
    assert torch.isfinite(log_softmax(z)).all()
    loss = cross_entropy(z, torch.tensor([1, 0, 2]))
    assert torch.isfinite(loss)


@settings(max_examples=50, deadline=None)
@given(c=st.floats(-1e3, 1e3), seed=st.integers(0, 2**16))
def test_translation_invariance(c, seed):
    z = logits(seed, dtype=torch.float64)
    torch.testing.assert_close(softmax(z + c), softmax(z), rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_log_softmax_and_cross_entropy(seed):
    z = logits(seed)
    torch.testing.assert_close(log_softmax(z), torch.log_softmax(z, -1),
                               rtol=0, atol=1e-5)
    t = torch.randint(0, z.shape[-1], z.shape[:-1],
                      generator=torch.Generator().manual_seed(seed))
    ref = torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]),
                                            t.reshape(-1), reduction="none")
    torch.testing.assert_close(cross_entropy(z, t, reduction="none"),
                               ref.reshape(t.shape), rtol=0, atol=1e-5)
    torch.testing.assert_close(cross_entropy(z, t), ref.mean(),
                               rtol=0, atol=ATOL)
    torch.testing.assert_close(cross_entropy(z, t, reduction="sum"),
                               ref.sum(), rtol=1e-6, atol=0)


def test_uniform_loss_is_log_v():
    for V in (2, 50, 4096):
        loss = cross_entropy(torch.zeros(4, V), torch.zeros(4,
                                                            dtype=torch.long))
        assert abs(loss.item() - math.log(V)) < ATOL


@pytest.mark.parametrize("seed", range(3))
def test_gradients(seed):
    z = logits(seed, shape=(6, 11), dtype=torch.float64).requires_grad_()
    w = torch.randn(6, 11, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(seed + 100))
    (softmax(z) * w).sum().backward()
    ours = z.grad.clone()
    z.grad = None
    (torch.softmax(z, -1) * w).sum().backward()
    torch.testing.assert_close(ours, z.grad, rtol=0, atol=1e-12)

    t = torch.arange(6) % 11
    z.grad = None
    cross_entropy(z, t).backward()
    ours = z.grad.clone()
    z.grad = None
    torch.nn.functional.cross_entropy(z, t).backward()
    torch.testing.assert_close(ours, z.grad, rtol=0, atol=1e-12)


def test_bad_input():
    z = torch.randn(2, 3)
    cases = [
        (lambda: softmax([1.0, 2.0]), "z: expected a torch.Tensor"),
        (lambda: softmax(torch.tensor([1, 2])), "floating-point"),
        (lambda: softmax(torch.zeros(2, 0)), "at least one candidate"),
        (lambda: softmax(z, temperature=0), "temperature"),
        (lambda: cross_entropy(z, torch.tensor([0, 1.0])), "targets"),
        (lambda: cross_entropy(z, torch.tensor([0, 1, 2])), "shape"),
        (lambda: cross_entropy(z, torch.tensor([0, 3])), r"\[0, 3\)"),
        (lambda: cross_entropy(z, torch.tensor([0, 1]), reduction="avg"),
         "reduction"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


# ---------------------------------------------- transformer.checks (chapter 01)

@pytest.mark.parametrize("value, kw, message", [
    (True, {"low": 1}, "n: expected an int >= 1, got True"),
    (2.0, {"low": 1}, "n: expected an int >= 1, got 2.0"),
    (0, {"low": 1}, "n: expected an int >= 1, got 0"),
    (9, {"low": 1, "high": 8}, "n: expected an int in [1, 8], got 9"),
    (9, {"high": 8}, "n: expected an int <= 8, got 9"),
    ("3", {"low": 0, "none_ok": True},
     "n: expected None or an int >= 0, got '3'"),
])
def test_check_int_names_the_argument_and_range(value, kw, message):
    from transformer.checks import check_int
    with pytest.raises(ValueError) as err:
        check_int("n", value, **kw)
    assert str(err.value) == message


@pytest.mark.parametrize("value, kw, message", [
    (float("nan"), {}, "x: expected a finite number, got nan"),
    (float("inf"), {"low": 0}, "x: expected a finite number >= 0, got inf"),
    (float("nan"), {"finite": False}, "x: expected a number, got nan"),
    (False, {}, "x: expected a finite number, got False"),
    (0, {"low": 0, "low_open": True}, "x: expected a finite number > 0, got 0"),
    (1.0, {"low": 0, "high": 1, "high_open": True},
     "x: expected a finite number in [0, 1), got 1.0"),
    (0.0, {"low": 0, "high": 1, "low_open": True, "high_open": True},
     "x: expected a finite number in (0, 1), got 0.0"),
])
def test_check_number_names_the_argument_and_range(value, kw, message):
    from transformer.checks import check_number
    with pytest.raises(ValueError) as err:
        check_number("x", value, **kw)
    assert str(err.value) == message


def test_checks_accept_what_they_promise():
    from transformer.checks import check_int, check_number, is_int
    check_int("n", 8, 1, 8)
    check_int("n", None, 1, none_ok=True)
    check_number("x", float("inf"), 0, low_open=True, finite=False)
    check_number("x", 1, 0, 1)  # an int is a number; bounds closed
    check_number("x", None, none_ok=True)
    check_number("x", 10**400, 0)  # an int too large for a float: no error
    assert is_int(3) and not is_int(True) and not is_int(3.0)
