"""Chapter "Training": the loop, evaluation, checkpoints, sampler, commands.

Bit-identity claims (determinism, resume) are checked with exact equality of
Python floats; everything runs on tiny models and synthetic streams so the
file takes seconds."""
import argparse
import math
import signal

import pytest
import torch

from transformer.baseline import get_batch
from transformer.model import GPT, GPTConfig
from transformer.training import (PRESETS, TrainConfig, configs_from,
                                  evaluate, init_model, load_checkpoint,
                                  model_from_checkpoint, sample_ids,
                                  save_checkpoint, train)

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
    sizes = {}
    for name in PRESETS:
        model_cfg, train_cfg = configs_from(name)
        sizes[name] = GPT(model_cfg).n_params()
        assert train_cfg.steps > 0
    tiny = configs_from("tiny")[0]
    assert (tiny.vocab_size, tiny.block_size, tiny.n_layer, tiny.n_head,
            tiny.n_embd) == (1024, 128, 4, 4, 128)
    assert 8e6 <= sizes["small"] <= 12e6


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
    with pytest.raises(ValueError, match="^n_layer: expected a positive"):
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
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(path)
    with pytest.raises(ValueError, match="no file"):
        load_checkpoint(tmp_path / "missing.pt")


# --------------------------------------------------------------- sampling

def test_sampler_limits():
    model = init_model(small_config(), 0)
    ids = torch.tensor([[1, 2, 3]])  # (1, 3)
    g = torch.Generator().manual_seed(0)
    greedy = sample_ids(model, ids, 10, temperature=0)
    assert greedy.shape == (1, 13) and torch.equal(greedy[:, :3], ids)
    assert torch.equal(sample_ids(model, ids, 10, top_k=1, generator=g),
                       greedy)
    assert torch.equal(sample_ids(model, ids, 10, top_p=1e-6, generator=g),
                       greedy)
    # longer than block_size: the window slides
    assert sample_ids(model, ids, 20, generator=g).shape == (1, 23)
    with pytest.raises(ValueError, match="^temperature:"):
        sample_ids(model, ids, 1, temperature=-1)
    with pytest.raises(ValueError, match="^top_p:"):
        sample_ids(model, ids, 1, top_p=0)
