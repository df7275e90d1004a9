"""Chapter "Training": the loop, evaluation, checkpoints, sampler, commands.

Bit-identity claims (determinism, resume) are checked with exact equality of
Python floats; everything runs on tiny models and synthetic streams so the
file takes seconds."""
import argparse
import dataclasses
import math
import re
import signal

from pathlib import Path

import pytest
import torch

import transformer.training as training_module

from transformer.baseline import get_batch
from transformer.model import GPT, GPTConfig
from transformer.checkpoint import (check_weights_fit, load_checkpoint,
                                    model_from_checkpoint,
                                    remove_stale_temporaries, save_checkpoint)
from transformer.training import (PRESETS, TrainConfig, TrainingInterrupted,
                                  configs_from, evaluate, evaluate_text,
                                  init_model, read_text, step_function,
                                  text_stream, train)

V = 32


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def small_config(**kw):
    base = dict(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16)
    return GPTConfig(**{**base, **kw})


def streams(seed=0, n=2000):
    """A learnable synthetic stream: a noisy cycle through the vocabulary."""
    g = torch.Generator().manual_seed(seed)
    base = torch.arange(n) % V  # (N,)
    noise = torch.randint(0, V, (n,), generator=g)  # (N,)
    keep = torch.rand(n, generator=g) < 0.8  # (N,)
    ids = torch.where(keep, base, noise).to(torch.int64)  # (N,)
    return ids[:1600], ids[1600:]


def quick_cfg(**kw):
    base = dict(steps=12, batch_size=4, lr=1e-2, min_lr=1e-3,
                warmup_steps=3, eval_interval=4, eval_batches=2, seed=0)
    return TrainConfig(**{**base, **kw})


# ---------------------------------------------------------------- config

@pytest.mark.parametrize("field, value", [
    ("steps", -1), ("steps", 2.5), ("batch_size", 0), ("lr", -1e-3),
    ("lr", math.nan), ("min_lr", 1.0), ("warmup_steps", 500),
    ("weight_decay", -0.1), ("grad_clip", -1.0), ("eval_interval", 0),
    ("eval_batches", 0), ("seed", -3), ("seq_len", 0), ("beta1", 1.0),
    ("beta2", -0.5), ("checkpoint_interval", -1), ("steps", True)])
def test_train_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}:"):
        TrainConfig(**{field: value})


def test_presets_build_and_have_the_promised_sizes():
    """Each preset's comment states its parameters and tokens; the model
    built from it, the cost model's count and the run's length agree."""
    from transformer.model import gpt_param_count
    source = Path(training_module.__file__).read_text()
    for name in PRESETS:
        model_config, train_config = configs_from(name)
        counted = GPT(model_config).n_params()
        assert counted == gpt_param_count(model_config)
        tokens = (train_config.steps * train_config.batch_size
                  * model_config.block_size)
        stated = re.search(rf"# ([\d,]+) parameters, ([\d,]+) tokens[^\n]*\n"
                           rf"[^\n]*\n?\s*\"{name}\"", source)
        assert stated, f"preset {name!r} states no size"
        assert int(stated[1].replace(",", "")) == counted
        assert int(stated[2].replace(",", "")) == tokens


def test_configs_from_applies_typed_overrides_and_rejects():
    m, t = configs_from("tiny", {"n_layer": 2, "lr": 0.01, "steps": 10,
                                 "bias": False, "seq_len": None})
    assert (m.n_layer, t.lr, t.steps, m.bias, t.seq_len) == (
        2, 0.01, 10, False, None)
    assert t.warmup_steps == 10  # shrunk to the run
    with pytest.raises(ValueError, match="^preset:"):
        configs_from("huge")
    with pytest.raises(ValueError, match="unknown field 'n_layers'"):
        configs_from("tiny", {"n_layers": 2})
    with pytest.raises(ValueError, match="^n_layer: expected an int >= 1"):
        configs_from("tiny", {"n_layer": "two"})
    with pytest.raises(ValueError, match="^steps:"):
        configs_from("tiny", {"steps": -5})
    with pytest.raises(ValueError, match="^seq_len: expected <= the model"):
        configs_from("tiny", {"seq_len": 129})
    with pytest.raises(ValueError, match="^overrides: expected a dict"):
        configs_from("tiny", ["steps=3"])


# -------------------------------------------------------------- evaluate

def test_evaluate_is_the_mean_loss_on_fixed_seeded_windows():
    tr, va = streams()
    model = init_model(small_config(), 0)
    got = evaluate(model, va, 8, 4, 3, seed=5)
    g = torch.Generator().manual_seed(5)
    losses = []
    with torch.no_grad():
        for _ in range(3):
            x, y = get_batch(va, 4, 8, g)  # (B, T) each
            losses.append(model(x, y)[1].item())
    assert got == pytest.approx(sum(losses) / 3, rel=0, abs=1e-6)
    assert evaluate(model, va, 8, 4, 3, seed=5) == got  # bit-identical
    assert model.training  # mode restored


def test_evaluate_full_pass_counts_every_target_once():
    tr, va = streams()
    model = init_model(small_config(), 0)
    T = 16
    n = (len(va) - 1) // T
    with torch.no_grad():
        logits, _ = model(va[:n * T].view(n, T))  # (n, T, V)
        logp = torch.log_softmax(logits.double(), -1)  # (n, T, V)
        y = va[1:n * T + 1].view(n, T)  # (n, T)
        want = -logp.gather(-1, y[..., None]).mean().item()
    got = evaluate(model, va, T, 5, None)
    assert got == pytest.approx(want, rel=0, abs=1e-5)


def test_step_function_is_trains_step_bit_for_bit():
    """tools/bench_training times step_function: its steps must leave the
    weights exactly where `train`'s loop leaves them on the same batches."""
    tr, _ = streams()
    cfg = quick_cfg(eval_interval=100, checkpoint_interval=0)

    def batches(gen):
        return get_batch(tr, cfg.batch_size, 16, gen)

    a, b = init_model(small_config(), 0), init_model(small_config(), 0)
    train(a, batches, None, cfg)
    step = step_function(b, cfg, batches)
    made = [step() for _ in range(cfg.steps)]
    assert made == [True] * cfg.steps
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    with pytest.raises(ValueError, match="batches: expected a function"):
        step_function(b, cfg, tr)


# ------------------------------------------------------------------ train

def run(seed=0, path=None, resume=False, callback=None, **kw):
    tr, va = streams()
    model = init_model(small_config(), seed)
    return model, train(model, tr, va, quick_cfg(seed=seed, **kw), path,
                        resume=resume, callback=callback)


def test_train_returns_the_promised_history():
    _, h = run()
    assert h["steps"] == 12
    assert len(h["train_loss"]) == len(h["lr"]) == len(h["grad_norm"]) == 12
    assert h["val_steps"] == [0, 4, 8, 12]
    assert all(isinstance(x, float) for x in h["train_loss"] + h["val_loss"])
    assert h["val_loss"][0] == pytest.approx(math.log(V), abs=0.1)
    assert h["val_loss"][-1] < h["val_loss"][0] - 0.3  # it learns
    assert h["tokens"] == 12 * 4 * 16 and h["tokens_per_s"] > 0
    assert h["wall_s"] >= h["train_s"] > 0


def test_same_seed_is_bit_identical_and_a_different_seed_is_not():
    _, a = run(seed=0)
    _, b = run(seed=0)
    _, c = run(seed=1)
    assert a["train_loss"] == b["train_loss"]  # exact float equality
    assert a["val_loss"] == b["val_loss"]
    assert a["train_loss"] != c["train_loss"]


def test_resume_after_interrupt_is_bit_identical(tmp_path):
    ref_model, ref = run(seed=3)
    path = tmp_path / "ck.pt"

    def stop_at_5(step, hist):
        if step == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(seed=3, path=path, callback=stop_at_5)
    assert load_checkpoint(path)["step"] == 5
    # a fresh, differently initialised model: everything must come from disk
    tr, va = streams()
    model = init_model(small_config(), 99)
    h = train(model, tr, va, quick_cfg(seed=3), path, resume=True)
    assert h["resumed_from"] == 5
    assert h["train_loss"] == ref["train_loss"]
    assert h["val_steps"] == ref["val_steps"]
    assert h["val_loss"] == ref["val_loss"]
    for (name, p), q in zip(model.named_parameters(),
                            ref_model.parameters()):
        assert torch.equal(p, q), name


@pytest.fixture
def signals_handled():
    """SIGINT and SIGTERM as an interactive process gets them: the
    training loop leaves a signal alone if the process started with it
    ignored (a background job of a shell script ignores SIGINT), and the
    test suite may run as one."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT,
                                               signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("signals_handled")
def test_real_sigint_is_deferred_to_the_step_boundary(tmp_path):
    path = tmp_path / "ck.pt"
    before = signal.getsignal(signal.SIGINT)  # default, or ignored (nohup)
    _, ref = run(seed=2)

    def ctrl_c(step, hist):
        if step == 7:
            signal.raise_signal(signal.SIGINT)  # as if the user pressed it

    with pytest.raises(KeyboardInterrupt):
        run(seed=2, path=path, callback=ctrl_c)
    ck = load_checkpoint(path)
    assert ck["step"] == 7
    assert ck["history"]["train_loss"] == ref["train_loss"][:7]
    assert signal.getsignal(signal.SIGINT) is before  # handler restored


def test_resume_rejects_a_different_model_or_run(tmp_path):
    path = tmp_path / "ck.pt"
    run(seed=0, path=path)
    tr, va = streams()
    wider = init_model(small_config(n_embd=32), 0)
    with pytest.raises(ValueError, match="n_embd: model 32 vs checkpoint 16"):
        train(wider, tr, va, quick_cfg(), path, resume=True)
    with pytest.raises(ValueError, match="lr: 0.5 vs checkpoint 0.01"):
        train(init_model(small_config(), 0), tr, va, quick_cfg(lr=0.5),
              path, resume=True)


def test_train_rejects_bad_arguments():
    tr, va = streams()
    model = init_model(small_config(), 0)
    with pytest.raises(ValueError, match="^seq_len: expected <= the model"):
        train(model, tr, va, quick_cfg(seq_len=17))
    with pytest.raises(ValueError, match="^cfg:"):
        train(model, tr, va, dict(steps=3))
    with pytest.raises(ValueError, match="^train_ids:"):
        train(model, tr.float(), va, quick_cfg())
    with pytest.raises(ValueError, match="^resume:"):
        train(model, tr, va, quick_cfg(), None, resume=True)


# ------------------------------------------------------------ checkpoints

def test_checkpoint_round_trip_holds_everything(tmp_path):
    from transformer.baseline import token_stream  # cached in data/
    tok = token_stream(1024)[0]
    model = init_model(small_config(), 0)
    path = save_checkpoint(tmp_path / "m.pt", model, step=3,
                           train_config=quick_cfg(), tokenizer=tok)
    again, tok2, ck = model_from_checkpoint(path)
    assert ck["step"] == 3 and ck["train_config"]["lr"] == 0.01
    assert again.config == model.config
    for p, q in zip(again.parameters(), model.parameters()):
        assert torch.equal(p, q)
    text = "To be, or not to be: that is the question."
    assert tok2.encode(text) == tok.encode(text)
    assert list(tmp_path.iterdir()) == [path]  # no temporary files left


def test_a_crash_mid_write_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    model = init_model(small_config(), 0)
    path = save_checkpoint(tmp_path / "m.pt", model, step=1)
    before = path.read_bytes()
    real_save = torch.save

    def dying_save(obj, f):
        real_save(obj, f)
        f.truncate(100)  # half a file on disk, then the crash
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError):
        save_checkpoint(path, model, step=2)
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupted_checkpoints_are_rejected(tmp_path, damage):
    model = init_model(small_config(), 0)
    path = save_checkpoint(tmp_path / "m.pt", model, step=1)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":  # one byte inside the weights' storage
        idx = data.find(b"data/0") + 200
        data[idx] ^= 0xFF
    else:
        data = bytearray(b"not a checkpoint at all" * 10)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="^checkpoint:"):
        model_from_checkpoint(path)


def test_loading_never_unpickles_arbitrary_objects(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": "transformer-checkpoint",
                "payload": argparse.Namespace(x=1)}, path)
    with pytest.raises(ValueError, match="not a checkpoint written by") as e:
        load_checkpoint(path)
    assert "weights_only" not in str(e.value)  # never the unsafe advice
    with pytest.raises(ValueError, match="no file"):
        load_checkpoint(tmp_path / "missing.pt")


# -------------------------------------------------- interrupts and resume

@pytest.mark.usefixtures("signals_handled")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_is_deferred_and_reported_truthfully(tmp_path, sig):
    path = tmp_path / "ck.pt"
    before = signal.getsignal(sig)
    _, ref = run(seed=2)

    def send(step, hist):
        if step == 5:
            signal.raise_signal(sig)  # as `kill` or Ctrl-C would

    with pytest.raises(TrainingInterrupted) as stop:
        run(seed=2, path=path, callback=send)
    assert (stop.value.step, stop.value.saved_step) == (5, 5)
    assert stop.value.signum == sig
    assert load_checkpoint(path)["history"]["train_loss"] == \
        ref["train_loss"][:5]
    assert signal.getsignal(sig) is before


def test_a_signal_ignored_at_start_stays_ignored(tmp_path):
    """`python -m transformer train &` in a script: the shell starts the
    job with SIGINT ignored, so Ctrl-C meant for the script does not stop
    the job; the loop keeps it that way."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _, hist = run(callback=lambda step, h: signal.raise_signal(
            signal.SIGINT))
        assert hist["steps"] == 12  # every signal was ignored
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_interrupt_mid_step_saves_nothing_and_says_so(tmp_path):
    """A second Ctrl-C lands inside a step: the half-done step is not
    saved; the exception says which step the file still holds."""
    path = tmp_path / "ck.pt"
    model = init_model(small_config(), 0)
    forward, calls = model.forward, []

    def forward_then_interrupt(*args, **kw):
        if model.training:
            calls.append(1)
            if len(calls) == 6:  # inside step 6, after 5 whole steps
                raise KeyboardInterrupt
        return forward(*args, **kw)

    model.forward = forward_then_interrupt
    tr, va = streams()
    with pytest.raises(TrainingInterrupted) as stop:
        train(model, tr, va, quick_cfg(checkpoint_interval=3), path)
    assert (stop.value.step, stop.value.saved_step) == (5, 3)
    assert load_checkpoint(path)["step"] == 3
    # interrupted before any checkpoint: nothing written at all
    other = tmp_path / "none.pt"
    model, calls[:] = init_model(small_config(), 0), []
    forward = model.forward
    model.forward = forward_then_interrupt
    with pytest.raises(TrainingInterrupted) as stop:
        train(model, tr, va, quick_cfg(checkpoint_interval=0), other)
    assert stop.value.saved_step is None and not other.exists()


def test_an_interrupt_before_the_first_step_writes_nothing(tmp_path,
                                                           monkeypatch):
    import transformer.training as tr_mod
    path = tmp_path / "ck.pt"

    def interrupted(*args, **kw):
        raise KeyboardInterrupt  # during the step-0 evaluation

    monkeypatch.setattr(tr_mod, "evaluate", interrupted)
    with pytest.raises(TrainingInterrupted) as stop:
        run(path=path)
    assert (stop.value.step, stop.value.saved_step) == (0, None)
    assert not path.exists()


def test_resume_extends_a_finished_run_with_more_steps(tmp_path):
    path = tmp_path / "ck.pt"
    run(seed=0, path=path, steps=8)
    tr, va = streams()
    model = init_model(small_config(), 5)
    hist = train(model, tr, va, quick_cfg(steps=12), path, resume=True)
    assert hist["resumed_from"] == 8 and hist["steps"] == 12
    assert len(hist["train_loss"]) == 12
    with pytest.raises(ValueError, match="^steps: expected >= the "):
        train(init_model(small_config(), 0), tr, va, quick_cfg(steps=4),
              path, resume=True)


def test_default_checkpoint_interval_bounds_a_hard_kill():
    assert 1 <= TrainConfig().checkpoint_interval <= 100


def test_stale_temporaries_are_removed(tmp_path):
    path = tmp_path / "run[1].pt"  # glob characters in the name
    stale = [tmp_path / "run[1].pt.abc123.tmp", tmp_path / "run[1].pt.x.tmp"]
    keep = [tmp_path / "other.pt.abc.tmp", tmp_path / "run[1].pt"]
    for f in stale + keep:
        f.write_bytes(b"x")
    assert remove_stale_temporaries(path) == sorted(stale)
    assert all(not f.exists() for f in stale)
    assert all(f.exists() for f in keep)


# ------------------------------------------------------------ your own text

def test_read_text_refuses_what_it_cannot_train_on(tmp_path):
    good = tmp_path / "a.txt"
    good.write_text("hello\n", encoding="utf-8")
    assert read_text(good) == ("hello\n", [good])
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "b.txt").write_text("second", encoding="utf-8")
    (folder / "a.txt").write_text("first", encoding="utf-8")
    (folder / "skip.md").write_text("not read", encoding="utf-8")
    text, files = read_text(folder)
    assert text == "first\n\nsecond" and [f.name for f in files] == [
        "a.txt", "b.txt"]
    cases = {"empty.txt": (b"  \n", "is empty"),
             "bin.txt": (b"abc\x00def", "NUL byte at byte offset 3"),
             "latin.txt": (b"caf\xe9 au lait", "not UTF-8 text"
                           " (invalid continuation byte at byte offset 3)")}
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match=re.escape(message)) as err:
            read_text(tmp_path / name)
        assert name in str(err.value)
    with pytest.raises(ValueError, match="no file or folder"):
        read_text(tmp_path / "missing.txt")
    (tmp_path / "none").mkdir()
    with pytest.raises(ValueError, match="holds no .txt files"):
        read_text(tmp_path / "none")


def test_text_stream_splits_trains_on_the_training_part_and_caches(tmp_path):
    text = "".join(f"line {i % 37} of a tiny poem\n" for i in range(400))
    tok, train_ids, val_ids = text_stream(text, 300, tmp_path)
    cut = len(text) - round(len(text) * 0.1)
    assert tok.decode(train_ids.tolist()) == text[:cut]
    assert tok.decode(val_ids.tolist()) == text[cut:]
    cached = sorted((tmp_path / "tokenizers").iterdir())
    # the tokenizer and its seal (key and SHA-256 of the file)
    assert [p.suffix for p in cached] == ["", ".sha256"]
    again = text_stream(text, 300, tmp_path)
    assert torch.equal(again[1], train_ids)
    assert sorted((tmp_path / "tokenizers").iterdir()) == cached
    text_stream(text + "more", 300, tmp_path)  # other text: other key
    assert len(list((tmp_path / "tokenizers").iterdir())) == 4
    with pytest.raises(ValueError, match="^vocab_size: expected an int >"):
        text_stream(text, 10, tmp_path)


def test_evaluate_text_is_loss_perplexity_and_bits_per_byte(tmp_path):
    text = "".join(f"{i % 11} and {i % 7}\n" for i in range(300))
    tok, train_ids, val_ids = text_stream(text, 280, tmp_path)
    model = init_model(small_config(vocab_size=280), 0)
    r = evaluate_text(model, tok, val_ids, batch_size=4)
    assert r["loss"] == evaluate(model, val_ids, 16, 4, None)
    assert r["perplexity"] == pytest.approx(math.exp(r["loss"]), rel=1e-12)
    n = (len(val_ids) - 1) // 16 * 16
    n_bytes = len(tok.decode_bytes(val_ids[1:n + 1].tolist()))
    assert (r["tokens"], r["bytes"]) == (n, n_bytes)
    assert r["bits_per_byte"] == pytest.approx(
        r["loss"] * n / math.log(2) / n_bytes, rel=1e-12)


# ------------------------------------------------------------ checkpoints+

def test_a_config_that_does_not_describe_the_weights_is_refused(tmp_path):
    import time
    model = init_model(small_config(), 0)
    state = model.state_dict()
    check_weights_fit(model.config, state)  # the real pair fits
    for change, word in ((dict(n_layer=10**6), "n_layer"),
                         (dict(vocab_size=10**12), "differ"),
                         (dict(n_embd=32), "differ")):
        cfg = dataclasses.replace(model.config, **change)
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match=word):
            check_weights_fit(cfg, state)
        assert time.perf_counter() - t0 < 5  # refused, not allocated
    # the same through a file whose digest is intact
    from transformer.checkpoint import _digest
    path = save_checkpoint(tmp_path / "m.pt", model, step=1)
    ckpt = torch.load(path, weights_only=True)
    ckpt["model_config"]["n_layer"] = 10**6
    ckpt.pop("digest")
    ckpt["digest"] = _digest(ckpt)
    torch.save(ckpt, path)
    with pytest.raises(ValueError, match="n_layer = 1000000"):
        model_from_checkpoint(path)


# ---------------------------------------------------------------- devices
# A second device on a CPU-only machine: tensors that report the device
# "lazy" (a device type every PyTorch build knows, with no special cases
# in nn.Module, unlike "meta") and hold their values in a CPU tensor. The
# mode below creates them wherever code asks for that device, and fails
# any operation that mixes one with an ordinary CPU tensor of one or more
# dimensions: exactly what a CUDA device would refuse (0-dim CPU tensors
# and explicit copies are allowed there too).

OTHER = torch.device("lazy")


class _OnOther(torch.Tensor):
    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
            device=OTHER, requires_grad=elem.requires_grad)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        with OtherDevice():
            return func(*args, **(kwargs or {}))


class OtherDevice(torch.utils._python_dispatch.TorchDispatchMode):
    MOVES = (torch.ops.aten.copy_.default, torch.ops.aten._to_copy.default)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves, tree_map
        kwargs = dict(kwargs or {})
        leaves = tree_leaves((args, kwargs))
        on_other = any(isinstance(x, _OnOther) for x in leaves)
        strays = [x for x in leaves if isinstance(x, torch.Tensor)
                  and not isinstance(x, _OnOther) and x.dim() > 0]
        if on_other and strays and func not in self.MOVES:
            raise RuntimeError(f"{func}: a tensor of shape "
                               f"{tuple(strays[0].shape)} is on the CPU, "
                               f"not on the model's device")
        asked = kwargs.get("device")
        to_other = asked is not None and torch.device(asked) == OTHER
        if to_other:
            kwargs["device"] = torch.device("cpu")
        out = func(*tree_map(lambda x: x.elem if isinstance(x, _OnOther)
                             else x, (args, kwargs))[0],
                   **tree_map(lambda x: x.elem if isinstance(x, _OnOther)
                              else x, kwargs))
        if to_other or (on_other and asked is None):
            out = tree_map(lambda x: _OnOther(x)
                           if isinstance(x, torch.Tensor) else x, out)
        return out


def test_the_other_device_catches_a_tensor_made_off_the_device():
    with OtherDevice():
        x = torch.ones(3, device=OTHER)
        assert x.device == OTHER and (x * 2).sum().item() == 6
        x + torch.tensor(1.0)  # a 0-dim CPU scalar is allowed, as on CUDA
        with pytest.raises(RuntimeError, match="not on the model's device"):
            x + torch.arange(3)  # what torch.arange(T) without device does
        assert x.to("cpu").device.type == "cpu"


@pytest.mark.parametrize("kw", [
    {}, {"pos_encoding": "rope"}, {"pos_encoding": "sinusoidal"},
    {"pos_encoding": "none", "norm": "rmsnorm", "norm_position": "post"},
    {"fused": False}, {"fused": False, "pos_encoding": "rope"}])
def test_model_decode_loop_and_training_follow_the_models_device(kw,
                                                                  tmp_path):
    """Forward, backward, the cached decode loop past block_size, one
    training step with its evaluations, and loading a checkpoint: every
    tensor on the model's device, and every number as on the CPU."""
    from transformer.kv_cache import decode_stream
    cfg = small_config(**kw)
    tr, va = streams()
    prompt = torch.tensor([[1, 2, 3]])  # (1, 3)
    cpu = init_model(cfg, 0)
    want_tokens = torch.stack(list(decode_stream(cpu, prompt, 30,
                                                 temperature=0)), 1)
    want = train(cpu, tr, va, quick_cfg(steps=1, warmup_steps=0))
    path = save_checkpoint(tmp_path / "m.pt", cpu, step=1)
    with OtherDevice():
        torch.manual_seed(0)
        with torch.device(OTHER):
            model = GPT(cfg)  # the same initial weights as init_model
        assert {p.device for p in model.parameters()} == {OTHER}
        tokens = torch.stack(list(decode_stream(
            model, prompt.to(OTHER), 30, temperature=0)), 1)
        assert tokens.device == OTHER
        assert torch.equal(tokens.to("cpu"), want_tokens)
        got = train(model, tr, va, quick_cfg(steps=1, warmup_steps=0))
        assert got["train_loss"] == want["train_loss"]
        assert got["val_loss"] == want["val_loss"]
        loaded, _, _ = model_from_checkpoint(path, OTHER)
        assert {p.device for p in loaded.parameters()} == {OTHER}
        assert (loaded.lm_head.weight is loaded.wte.weight) == \
            cfg.tie_weights
        for a, b in zip(loaded.parameters(), cpu.parameters()):
            assert torch.equal(a.to("cpu"), b.detach())


def test_compiled_training_follows_the_eager_run():
    """train(..., compile=True) trains through compile_model: the same
    batches and updates as the eager run, so the loss curve agrees up to
    float rounding (compiled kernels sum in another order); a non-bool
    `compile` is refused by name."""
    tr, va = streams()
    curves = []
    for compile in (False, True):
        model = init_model(small_config(), 2)
        h = train(model, tr, va, quick_cfg(seed=2), compile=compile)
        curves.append(h["train_loss"] + h["val_loss"])
    assert len(curves[0]) == len(curves[1])
    for a, b in zip(*curves):
        assert abs(a - b) < 1e-3
    with pytest.raises(ValueError, match="compile"):
        train(init_model(small_config(), 2), tr, va, quick_cfg(),
              compile="yes")
