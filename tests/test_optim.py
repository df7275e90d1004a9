"""Chapter "Optimization and parameter updates": PyTorch is the oracle.

torch.optim.AdamW, torch.optim.lr_scheduler and
torch.nn.utils.clip_grad_norm_ were written by nobody on this project; the
worked example's answers are closed forms derived in the chapter."""
import math

import pytest
import torch

from transformer import AdamW, clip_grad_norm, lr_at

ATOL = 1e-6


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def small_net(seed, dtype=torch.float32):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(),
                              torch.nn.Linear(32, 16), torch.nn.Tanh(),
                              torch.nn.Linear(16, 4))
    return net.to(dtype)


def batches(seed, n, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        yield (torch.randn(16, 8, generator=g, dtype=dtype),  # (B, 8)
               torch.randn(16, 4, generator=g, dtype=dtype))  # (B, 4)


def train_step(net, opt, xb, yb, clip=None, max_norm=1.0):
    opt.zero_grad()
    ((net(xb) - yb) ** 2).mean().backward()
    if clip is not None:
        clip(net.parameters(), max_norm)
    opt.step()


def assert_params_close(a, b, atol=ATOL):
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=atol)


# ---- the worked example: f(x) = theta * x, x = 2, y = 6 -----------------

def we_loss(theta, lam):
    return (2 * theta - 6) ** 2 + lam * theta ** 2


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0, 4.0, 10.0])
def test_worked_example_minimum(lam):
    theta_star = 12 / (4 + lam)
    if lam == 0:
        assert theta_star == 3.0
    t = torch.tensor(theta_star, dtype=torch.float64, requires_grad=True)
    we_loss(t, lam).backward()
    assert abs(t.grad.item()) < 1e-12  # the slope vanishes there
    # the curvature is 8 + 2*lam, so one step of size 1/h from anywhere
    # lands exactly on the minimum (eq-gd-error with factor 0)
    h = 8 + 2 * lam
    for start in (-5.0, 0.0, 7.0):
        s = torch.tensor(start, dtype=torch.float64, requires_grad=True)
        we_loss(s, lam).backward()
        assert abs(start - s.grad.item() / h - theta_star) < 1e-12
    # and it is the global minimum on a grid
    grid = torch.linspace(-10, 10, 200_001, dtype=torch.float64)
    assert abs(grid[we_loss(grid, lam).argmin()].item() - theta_star) < 1e-4


@pytest.mark.parametrize("lam", [0.0, 1.0, 4.0])
@pytest.mark.parametrize("fraction", [0.5, 0.99, 1.0, 1.01, 1.2])
def test_gradient_descent_step_limit(lam, fraction):
    h = 8 + 2 * lam
    lr = fraction * 2 / h  # fraction of the largest stable step
    theta_star = 12 / (4 + lam)
    theta = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    steps = 300
    for _ in range(steps):
        theta.grad = None
        we_loss(theta, lam).backward()
        with torch.no_grad():
            theta -= lr * theta.grad
    err = abs(theta.item() - theta_star)
    predicted = theta_star * abs(1 - lr * h) ** steps  # |e_0| = theta_star
    assert abs(err - predicted) <= 1e-8 * max(predicted, 1.0)
    if fraction < 1:
        assert err < theta_star
    elif fraction == 1:
        assert abs(err - theta_star) < 1e-9  # bounces forever
    else:
        assert err > 10 * theta_star  # diverges


# ---- AdamW against torch.optim.AdamW -------------------------------------

CONFIGS = [
    dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    dict(lr=3e-3, betas=(0.0, 0.5), eps=1e-8, weight_decay=0.0),
    dict(lr=1e-2, betas=(0.95, 0.9999), eps=1e-10, weight_decay=1.0),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_adamw_matches_torch(config):
    ours, ref = small_net(0), small_net(0)
    opt = AdamW(ours.parameters(), **config)
    ref_opt = torch.optim.AdamW(ref.parameters(), amsgrad=False, **config)
    for step, (xb, yb) in enumerate(batches(1, 300), start=1):
        train_step(ours, opt, xb, yb)
        train_step(ref, ref_opt, xb, yb)
        if step % 50 == 0:
            assert_params_close(ours, ref)
    for p, q in zip(ours.parameters(), ref.parameters()):
        s, r = opt.state[p], ref_opt.state[q]
        assert s["step"] == int(r["step"].item()) == 300
        torch.testing.assert_close(s["exp_avg"], r["exp_avg"],
                                   rtol=0, atol=ATOL)
        torch.testing.assert_close(s["exp_avg_sq"], r["exp_avg_sq"],
                                   rtol=0, atol=ATOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adamw_bit_identical_to_torch(dtype):
    """The chapter claims the same operations in the same order."""
    ours, ref = small_net(1, dtype), small_net(1, dtype)
    opt = AdamW(ours.parameters(), lr=1e-2, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    for xb, yb in batches(2, 200, dtype):
        train_step(ours, opt, xb, yb)
        train_step(ref, ref_opt, xb, yb)
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(p, q)


def test_adamw_in_chunks_bit_identical_to_torch():
    """A parameter of several cache chunks (kernels._CHUNK values each, a
    ragged last one) is updated chunk by chunk: on one thread the same
    bits as torch.optim.AdamW's whole-tensor passes, step after step."""
    import transformer.kernels as K
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        init = torch.randn(2 * K._CHUNK + 777, generator=g)
        ours = torch.nn.Parameter(init.clone())
        ref = torch.nn.Parameter(init.clone())
        opt = AdamW([ours], lr=1e-2, weight_decay=0.1)
        ref_opt = torch.optim.AdamW([ref], lr=1e-2, weight_decay=0.1)
        for _ in range(3):
            grad = torch.randn(init.shape, generator=g)
            ours.grad, ref.grad = grad.clone(), grad.clone()
            opt.step()
            ref_opt.step()
        assert len(K.cache_chunks(ours.data)) == 3
        assert torch.equal(ours, ref)
        assert torch.equal(opt.state[ours]["exp_avg_sq"],
                           ref_opt.state[ref]["exp_avg_sq"])
    finally:
        torch.set_num_threads(threads)

def test_adamw_param_groups_and_schedule():
    ours, ref = small_net(2), small_net(2)

    def groups(net):
        decay = [p for p in net.parameters() if p.dim() >= 2]
        no_decay = [p for p in net.parameters() if p.dim() < 2]
        return [{"params": decay, "weight_decay": 0.1},
                {"params": no_decay, "weight_decay": 0.0, "lr": 5e-3}]

    opt = AdamW(groups(ours), lr=3e-3)
    ref_opt = torch.optim.AdamW(groups(ref), lr=3e-3)
    # each group follows the schedule from its own peak (3e-3 and 5e-3), so
    # the per-group learning rate is exercised at every step
    peaks = [g["lr"] for g in opt.param_groups]
    assert peaks == [3e-3, 5e-3] == [g["lr"] for g in ref_opt.param_groups]
    for t, (xb, yb) in enumerate(batches(3, 250)):
        for o in (opt, ref_opt):
            for group, peak in zip(o.param_groups, peaks):
                group["lr"] = lr_at(t, peak, 25, 200, peak / 10)
        if t > 0:
            assert opt.param_groups[0]["lr"] != opt.param_groups[1]["lr"]
        train_step(ours, opt, xb, yb, clip_grad_norm, 0.5)
        train_step(ref, ref_opt, xb, yb, torch.nn.utils.clip_grad_norm_, 0.5)
        if t % 50 == 49:
            assert_params_close(ours, ref)
    assert_params_close(ours, ref)


def test_adamw_skips_params_without_grad():
    ours, ref = small_net(3), small_net(3)
    frozen = [net[0].weight for net in (ours, ref)]
    for f in frozen:
        f.requires_grad_(False)
    before = frozen[0].detach().clone()
    opt = AdamW(ours.parameters(), lr=1e-2, weight_decay=0.5)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.5)
    for xb, yb in batches(4, 30):
        train_step(ours, opt, xb, yb)
        train_step(ref, ref_opt, xb, yb)
    assert torch.equal(frozen[0], before)  # no decay without a gradient
    assert frozen[0] not in opt.state
    assert_params_close(ours, ref)


def test_adamw_state_dict_resume(tmp_path):
    data = list(batches(5, 100))
    straight = small_net(4)
    opt = AdamW(straight.parameters(), lr=1e-2, weight_decay=0.1)
    for xb, yb in data:
        train_step(straight, opt, xb, yb)

    first = small_net(4)
    opt1 = AdamW(first.parameters(), lr=1e-2, weight_decay=0.1)
    for xb, yb in data[:50]:
        train_step(first, opt1, xb, yb)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": first.state_dict(), "opt": opt1.state_dict()}, path)

    ckpt = torch.load(path, weights_only=True)
    resumed = small_net(99)  # different init: everything must come from ckpt
    resumed.load_state_dict(ckpt["model"])
    opt2 = AdamW(resumed.parameters(), lr=1e-2, weight_decay=0.1)
    opt2.load_state_dict(ckpt["opt"])
    for xb, yb in data[50:]:
        train_step(resumed, opt2, xb, yb)
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(p, q)


def _mutant_adamw_step(params, states, lr, betas, eps, wd,
                       bias_correction=True, decoupled=True):
    """A second, independent AdamW with switches for two classic bugs."""
    beta1, beta2 = betas
    with torch.no_grad():
        for p in params:
            st = states.setdefault(p, {"t": 0, "m": torch.zeros_like(p),
                                       "v": torch.zeros_like(p)})
            st["t"] += 1
            g = p.grad if decoupled else p.grad + wd * p
            if decoupled:
                p.mul_(1 - lr * wd)
            st["m"].lerp_(g, 1 - beta1)
            st["v"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
            c1 = 1 - beta1 ** st["t"] if bias_correction else 1.0
            c2 = 1 - beta2 ** st["t"] if bias_correction else 1.0
            denom = (st["v"].sqrt() / c2 ** 0.5).add_(eps)
            p.addcdiv_(st["m"], denom, value=-lr / c1)


@pytest.mark.parametrize("mutation", [None, "no_bias_correction",
                                      "l2_in_gradient"])
def test_adamw_mutants_are_caught(mutation):
    """The comparison with torch must be able to fail: the harness is
    first shown to match, then each bug must break the match."""
    hyper = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, wd=0.1)
    net, ref = small_net(6), small_net(6)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=hyper["lr"],
                                betas=hyper["betas"], eps=hyper["eps"],
                                weight_decay=hyper["wd"])
    states = {}
    for xb, yb in batches(7, 50):
        net.zero_grad()
        ((net(xb) - yb) ** 2).mean().backward()
        _mutant_adamw_step(
            list(net.parameters()), states, **hyper,
            bias_correction=mutation != "no_bias_correction",
            decoupled=mutation != "l2_in_gradient")
        train_step(ref, ref_opt, xb, yb)
    gap = max((p - q).abs().max().item()
              for p, q in zip(net.parameters(), ref.parameters()))
    if mutation is None:
        assert gap <= ATOL
    else:
        assert gap > 1e-3


# ---- the learning-rate schedule ------------------------------------------

@pytest.mark.parametrize("warmup,total,min_lr", [(10, 100, 0.0),
                                                 (5, 37, 1e-4),
                                                 (2, 3, 0.0),
                                                 (50, 60, 3e-4)])
def test_lr_at_matches_torch_schedulers(warmup, total, min_lr):
    """Oracle: LinearLR (warmup) then CosineAnnealingLR, chained."""
    max_lr = 1e-3
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=max_lr)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(
            opt, start_factor=1 / warmup, end_factor=1.0,
            total_iters=warmup - 1),
        torch.optim.lr_scheduler.CosineAnnealingLR(
            opt, T_max=total - warmup, eta_min=min_lr)],
        milestones=[warmup])
    for t in range(total + 1):
        ref = opt.param_groups[0]["lr"]
        assert abs(lr_at(t, max_lr, warmup, total, min_lr) - ref) \
            <= 1e-6 * max_lr, t
        opt.step()  # no gradient: a no-op, but the scheduler expects it
        sched.step()


def test_lr_at_corners():
    max_lr, min_lr = 6e-4, 6e-5
    W, N = 100, 1000
    lrs = [lr_at(t, max_lr, W, N, min_lr) for t in range(1500)]
    assert lrs[0] == max_lr / W and lrs[W - 1] == max_lr == lrs[W]
    assert all(a < b for a, b in zip(lrs[:W - 1], lrs[1:W]))  # rising
    assert all(a > b for a, b in zip(lrs[W:N], lrs[W + 1:N + 1]))  # falling
    assert all(lr == min_lr for lr in lrs[N:])
    mid = (W + N) // 2
    assert abs(lrs[mid] - (min_lr + max_lr) / 2) < 1e-15
    # no warmup: the first step is already at the peak
    assert lr_at(0, max_lr, 0, N) == max_lr
    # warmup as long as the run: a pure ramp, then the floor
    assert lr_at(N - 1, max_lr, N, N, min_lr) == max_lr
    assert lr_at(N, max_lr, N, N, min_lr) == min_lr
    assert all(0 < lr <= max_lr for lr in lrs[:W])  # warmup starts near 0
    assert all(min_lr <= lr <= max_lr for lr in lrs[W:])


# ---- gradient clipping ---------------------------------------------------

def _grads_for(net, scale, seed=8):
    g = torch.Generator().manual_seed(seed)
    dtype = next(net.parameters()).dtype
    xb = torch.randn(32, 8, generator=g, dtype=dtype)  # (B, 8)
    (net(xb) ** 2).sum().mul(scale).backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("max_norm", [0.1, 1.0, 1e6])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 100.0])
def test_clip_grad_norm_matches_torch(dtype, max_norm, scale):
    ours, ref = small_net(9, dtype), small_net(9, dtype)
    for net in (ours, ref):
        net[2].bias.requires_grad_(False)  # one parameter without a gradient
        _grads_for(net, scale)
    before = [p.grad.clone() for p in ours.parameters() if p.grad is not None]
    n_ours = clip_grad_norm(ours.parameters(), max_norm)
    n_ref = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
    torch.testing.assert_close(n_ours.to(dtype), n_ref, rtol=1e-6, atol=0)
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            tol = 1e-6 * max(q.grad.abs().max().item(), 1e-30)
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=tol)
    after = [p.grad for p in ours.parameters() if p.grad is not None]
    new_norm = torch.cat([a.flatten() for a in after]).norm().item()
    if n_ref.item() <= max_norm:  # nothing to clip: bit-for-bit unchanged
        assert all(torch.equal(a, b) for a, b in zip(after, before))
    else:
        # float32 rounding can leave it a hair above max_norm
        assert abs(new_norm - max_norm) < 1e-5 * max_norm


def test_clip_grad_norm_single_tensor_and_edge_cases():
    p = torch.zeros(4, requires_grad=True)
    p.grad = torch.tensor([3.0, 4.0, 0.0, 0.0])  # norm 5
    norm = clip_grad_norm(p, 1.0)
    assert norm.item() == 5.0
    torch.testing.assert_close(p.grad, torch.tensor([0.6, 0.8, 0.0, 0.0]),
                               rtol=0, atol=1e-6)
    # no gradients at all: norm 0, nothing to do
    q = torch.zeros(2, requires_grad=True)
    assert clip_grad_norm([q], 1.0).item() == 0.0 and q.grad is None
    # a non-finite norm is returned and the gradients are left untouched
    p.grad = torch.tensor([float("inf"), 1.0, 0.0, 0.0])
    norm = clip_grad_norm([p], 1.0)
    assert math.isinf(norm.item()) and p.grad[1].item() == 1.0


# ---- bad input -----------------------------------------------------------

@pytest.mark.parametrize("kwargs,name", [
    (dict(lr=-1e-3), "lr"),
    (dict(lr=float("nan")), "lr"),
    (dict(betas=(1.0, 0.999)), r"betas\[0\]"),
    (dict(betas=(0.9, -0.1)), r"betas\[1\]"),
    (dict(betas=(0.9, 1.0)), r"betas\[1\]"),
    (dict(betas=(0.9,)), "betas"),
    (dict(eps=-1e-8), "eps"),
    (dict(weight_decay=-0.1), "weight_decay"),
])
def test_bad_hyperparameters(kwargs, name):
    p = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match=name):
        AdamW([p], **kwargs)


def test_bad_param_group_is_rejected_and_not_added():
    a = torch.zeros(2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    opt = AdamW([a])
    with pytest.raises(ValueError, match="lr"):
        opt.add_param_group({"params": [b], "lr": -1.0})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("args,kwargs,name", [
    ((-1, 1e-3, 10, 100), {}, "step"),
    ((1.5, 1e-3, 10, 100), {}, "step"),
    ((0, 1e-3, 200, 100), {}, "warmup_steps"),
    ((0, 1e-3, -1, 100), {}, "warmup_steps"),
    ((0, 1e-3, 0, 0), {}, "total_steps"),
    ((0, -1e-3, 10, 100), {}, "max_lr"),
    ((0, 1e-3, 10, 100), dict(min_lr=1e-2), "min_lr"),
    ((0, 1e-3, 10, 100), dict(min_lr=-1e-5), "min_lr"),
])
def test_lr_at_bad_arguments(args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        lr_at(*args, **kwargs)


@pytest.mark.parametrize("max_norm", [0.0, -1.0, float("nan"), float("inf")])
def test_clip_grad_norm_bad_max_norm(max_norm):
    p = torch.zeros(2, requires_grad=True)
    p.grad = torch.ones(2)
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm([p], max_norm)
