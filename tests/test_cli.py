"""Appendix "The command line": `python -m transformer` and its verbs.

Every usage error and bad file gives one line on stderr and exit code 2,
never a traceback; the tests run tiny configurations so the file takes
well under two minutes."""
import argparse
import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer import cli, cli_options

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, env=None, timeout=300, **kw):
    """`python -m transformer ARGS` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "transformer", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=env, **kw)


def one_line_error(result, *words):
    """Exit code 2, a single line on stderr containing `words`, no
    traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# ------------------------------------------------------------- dispatcher

def test_help_lists_every_command():
    result = run("--help")
    assert result.returncode == 0
    for verb in cli.COMMANDS:
        assert verb in result.stdout


def test_unknown_command_is_a_usage_error_without_traceback():
    one_line_error(run("frobnicate"), "unknown command 'frobnicate'")


def test_no_command_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("verb", sorted(cli.COMMANDS))
def test_every_verb_has_help_for_every_option(verb, capsys):
    assert cli.main([verb, "--help"]) == 0
    parser = cli.COMMANDS[verb][1]()
    for action in parser._actions:
        assert action.help, (verb, action.dest)
        if action.default not in (None, False, []) and action.dest != "help":
            assert "default" in action.help or "(default:" in \
                parser.format_help(), (verb, action.dest)


CLI_ALONE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location(
    "cli_alone", sys.argv[1])
cli = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cli)
for verb in [None, *cli.COMMANDS]:
    try:
        cli.main(["--help"] if verb is None else [verb, "--help"])
    except SystemExit:
        pass
assert "torch" not in sys.modules, "the help imported torch"
print("no torch")
"""


def test_help_of_every_verb_imports_no_torch():
    """The command-line layer alone: every --help is answered from the
    source files, without importing torch."""
    path = os.path.join(ROOT, "transformer", "cli.py")
    result = subprocess.run([sys.executable, "-c", CLI_ALONE, path],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "no torch" in result.stdout


def imported_modules(stderr: str) -> set[str]:
    """Module names from the report of `python -X importtime`."""
    return {line.rsplit("|", 1)[-1].strip()
            for line in stderr.splitlines()
            if line.startswith("import time:")}


@pytest.mark.parametrize("verb", [None, *sorted(cli.COMMANDS)])
def test_python_m_transformer_help_imports_no_torch(verb):
    """The whole path the shell takes, package __init__ included."""
    args = ["--help"] if verb is None else [verb, "--help"]
    result = subprocess.run([sys.executable, "-X", "importtime", "-m",
                             "transformer", *args], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-500:]
    modules = imported_modules(result.stderr)
    assert "argparse" in modules  # the report is read correctly
    torch = sorted(m for m in modules if m.split(".")[0] == "torch")
    assert not torch, torch[:5]


def test_help_names_match_the_library():
    """What the help reads from the source equals what the library
    defines."""
    from transformer.cost_model import GPT2_SMALL
    from transformer.model import GPTConfig
    from transformer.training import PRESETS, TrainConfig
    for cls, module in ((GPTConfig, "model"), (TrainConfig, "training")):
        fields = cli_options.source_fields(module, cls.__name__)
        want = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        assert {k: v[0] for k, v in fields.items()} == want
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                assert eval(fields[f.name][1]) == f.default, f.name
    assert cli_options.source_constant("training", "PRESETS") == {
        name: (dict(m), dict(t)) for name, (m, t) in PRESETS.items()}
    shape = cli_options.source_constant("cost_model", "GPT2_SMALL")
    assert shape == {k: getattr(GPT2_SMALL, k) for k in shape}


def test_parse_overrides_types_and_errors():
    got = cli_options.parse_overrides(["n_layer=2", "lr=0.01", "bias=false",
                               "seq_len=none", "norm=rmsnorm"])
    assert got == {"n_layer": 2, "lr": 0.01, "bias": False,
                   "seq_len": None, "norm": "rmsnorm"}
    for item, message in (("n_layers=2", "unknown field 'n_layers'"),
                          ("n_layer=two", "n_layer: expected an int"),
                          ("bias=maybe", "bias: expected a bool"),
                          ("steps", "expected FIELD=VALUE")):
        with pytest.raises(ValueError, match=message):
            cli_options.parse_overrides([item])


# ------------------------------------------------------------------- cost

def test_cost_prints_the_table(capsys):
    assert cli.main(["cost", "--n-layer", "2", "--contexts", "16,32"]) == 0
    out = capsys.readouterr().out
    assert "KV cache passes the weights" in out
    rows = [ln.split() for ln in out.splitlines()
            if ln.strip().startswith(("16 ", "32 "))]
    assert len(rows) == 2
    # the printed count is the model's: GPT-2 small's defaults, two layers
    import torch
    from transformer.model import GPT, GPTConfig
    with torch.device("meta"):  # counted without allocating the weights
        want = GPT(GPTConfig(vocab_size=50257, block_size=1024, n_layer=2,
                             n_head=12, n_embd=768)).n_params()
    assert out.splitlines()[0].startswith(f"{want:,} parameters")
    # FLOPs of a forward pass are linear in T at these lengths: 32 ~ 2 x 16
    assert abs(float(rows[1][1]) / float(rows[0][1]) - 2) < 0.01


@pytest.mark.parametrize("argv, message", [
    (["--n-head", "7"], "n_embd: expected a multiple of n_head = 7"),
    (["--n-layer", "0"], "--n-layer: expected an int >= 1, got 0"),
    (["--contexts", "abc"], "--contexts: expected comma-separated ints"),
    (["--batch", "0"], "--batch: expected an int >= 1, got 0"),
    (["--ffn-mult", "0.3"], "ffn_mult"),
])
def test_cost_bad_shapes_are_one_line_errors(argv, message, capsys):
    assert cli.main(["cost", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing printed before the error
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err


def test_cost_into_a_closed_pipe_exits_quietly():
    """`cost | head -1`: the reader leaves early; no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer", "cost", "--contexts",
         ",".join(["128"] * 20000)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after one line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


# ------------------------------------------------------------------ train

TINY = ["--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_head=2",
        "--set", "block_size=16", "--set", "batch_size=2",
        "--set", "eval_batches=1", "--no-progress", "--threads", "1"]


@pytest.fixture
def text(tmp_path_factory, monkeypatch):
    """A small public-domain text (the first 30,000 characters of the
    Sonnets, from the cached corpus) in a folder of its own; tokenizer
    caches go to a temporary folder."""
    from transformer.data import load_documents
    folder = tmp_path_factory.mktemp("text")
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("TRANSFORMER_DATA", str(cache))
    path = folder / "sonnets.txt"
    path.write_text(dict(load_documents(
        os.path.join(ROOT, "data")))["sonnets_gut.txt"][:30_000],
        encoding="utf-8")
    return path


def own_text(path, ckpt, *more):
    return ["train", *TINY, "--data", str(path), "--vocab-size", "300",
            "--checkpoint", str(ckpt), *more]


def errors(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "invalid choice: 'huge'"),
    (["--set", "n_layers=2"], "unknown field 'n_layers'"),
    (["--set", "steps=-1"], "steps: expected an int >= 0"),
    (["--set", "seq_len=4096"], "seq_len: expected <= the model's"),
    (["--set", "n_head=3"], "n_embd: expected a multiple of n_head"),
    (["--set", "vocab_size=10"], "vocab_size: expected an int > 256"),
    (["--vocab-size", "10"], "--vocab-size: expected an int >= 257"),
    (["--bogus"], "unrecognized arguments"),
    (["--threads", "0"], "--threads: expected an int >= 1"),
    (["--device", "gpu"], "--device: expected cpu, cuda"),
    (["--resume", "--force"], "not allowed with argument"),
])
def test_train_bad_arguments_exit_2_with_one_line(argv, message, capsys,
                                                   tmp_path, one_thread):
    ckpt = tmp_path / "never.pt"
    assert cli.main(["train", "--checkpoint", str(ckpt), *argv]) == 2
    err = errors(capsys)
    assert len(err) == 1 and message in err[0], err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_train_eval_sample_on_your_own_text(text, tmp_path, capsys,
                                            one_thread):
    """The three commands of the README, on a small text."""
    ckpt, log = tmp_path / "son.pt", tmp_path / "logs" / "log.json"
    assert cli.main(own_text(text, ckpt, "--set", "steps=4",
                             "--log", str(log))) == 0
    out = capsys.readouterr()
    assert "step 4: train loss" in out.out and "new run" in out.err
    assert ckpt.is_file() and log.is_file()  # --log's folder was created
    from transformer.checkpoint import load_checkpoint
    data = load_checkpoint(ckpt)["data"]
    assert data["kind"] == "text" and data["path"] == str(text)
    assert cli.main(["eval", "--checkpoint", str(ckpt)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "sonnets.txt' (last tenth)" in lines[0]
    loss, ppl, bpb = (float(w) for w in re.findall(r"[\d.]+", lines[1])[:3])
    assert ppl == pytest.approx(math.exp(loss), rel=1e-3)
    assert 0 < bpb < 10
    assert cli.main(["sample", "--checkpoint", str(ckpt), "--prompt",
                     "Shall I", "--max-new-tokens", "40",
                     "--temperature", "0"]) == 0  # 40 > block_size 16
    assert capsys.readouterr().out.startswith("Shall I")


@pytest.mark.parametrize("content, message", [
    (None, "no file or folder at"),
    (b"", "is empty"),
    (b"\x7fELF\x02\x01\x00\x00", "looks binary (a NUL byte at byte offset"),
    (b"Shall I compare thee\xff to a summer", "is not UTF-8 text (invalid "
                                            "start byte at byte offset 20)"),
    (b"Too short for any window.", "held-out tokens; windows of 16 tokens"),
])
def test_bad_training_text_is_refused_before_training(content, message,
                                                      tmp_path, capsys,
                                                      monkeypatch,
                                                      one_thread):
    monkeypatch.setenv("TRANSFORMER_DATA", str(tmp_path / "cache"))
    data, ckpt = tmp_path / "in.txt", tmp_path / "out" / "c.pt"
    if content is not None:
        data.write_bytes(content)
    assert cli.main(own_text(data, ckpt)) == 2
    err = errors(capsys)
    assert len(err) == 1 and message in err[0], err
    assert not ckpt.parent.exists()  # nothing written


@pytest.mark.parametrize("where", ["folder", "under a file", "unwritable"])
def test_output_paths_are_checked_before_training(where, tmp_path, capsys,
                                                  one_thread):
    if where == "folder":
        ckpt, log = tmp_path, None
    elif where == "under a file":
        (tmp_path / "f").write_text("x")
        ckpt, log = tmp_path / "c.pt", tmp_path / "f" / "log.json"
    else:  # a folder nobody may create files in (root included)
        ckpt, log = Path("/proc/no-such-run/c.pt"), None
    argv = ["train", *TINY, "--checkpoint", str(ckpt)]
    argv += ["--log", str(log)] if log else []
    t0 = time.perf_counter()
    assert cli.main(argv) == 2
    assert time.perf_counter() - t0 < 10  # before any data or training
    err = errors(capsys)
    assert len(err) == 1 and ("--checkpoint" in err[0] or "--log" in
                              err[0]), err
    assert not (tmp_path / "c.pt").exists()


def test_steps_0_and_a_full_disk(tmp_path, capsys, monkeypatch, one_thread):
    ckpt = tmp_path / "c.pt"
    assert cli.main(["train", *TINY, "--set", "steps=0",
                     "--checkpoint", str(ckpt)]) == 0
    assert "step 0: no training step" in capsys.readouterr().out
    before = ckpt.read_bytes()

    def full(fd):
        raise OSError(28, "No space left on device")

    import transformer.checkpoint as ck_mod
    monkeypatch.setattr(ck_mod.os, "fsync", full)
    assert cli.main(["train", *TINY, "--set", "steps=2", "--force",
                     "--checkpoint", str(ckpt)]) == 2
    err = errors(capsys)  # the run's header, then one line of error
    [line] = [ln for ln in err if "error" in ln]
    assert line.startswith("python -m transformer train: error: checkpoint: "
                           "could not write ")
    assert line.endswith("(No space left on device); step 2 is not saved; "
                         "no checkpoint of this run was written (the file "
                         "there is as it was)")
    assert "Traceback" not in "\n".join(err)
    assert ckpt.read_bytes() == before  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def test_a_new_run_never_replaces_a_checkpoint_silently(tmp_path, capsys,
                                                        one_thread):
    ckpt = tmp_path / "c.pt"
    argv = ["train", *TINY, "--set", "steps=2", "--checkpoint", str(ckpt)]
    assert cli.main(argv) == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = errors(capsys)
    assert len(err) == 1 and "exists; pass --resume" in err[0]
    assert ckpt.read_bytes() == before
    (tmp_path / "c.pt.k1lled.tmp").write_bytes(b"half a file")
    assert cli.main([*argv, "--force", "--set", "seed=1"]) == 0
    assert "removed" in capsys.readouterr().err  # the stale temporary
    assert ckpt.read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def test_resume_reads_the_configuration_from_the_checkpoint(
        text, tmp_path, capsys, one_thread):
    from transformer.checkpoint import load_checkpoint
    ckpt = tmp_path / "c.pt"
    assert cli.main(own_text(text, ckpt, "--set", "steps=3")) == 0
    capsys.readouterr()
    # finished: extending needs more steps, and only steps may change
    base = ["train", "--resume", "--checkpoint", str(ckpt),
            "--no-progress", "--threads", "1"]
    for more, message in (((), "has done 3 of 3 steps"),
                          (("--set", "lr=0.1"), "--set lr: a resumed run"),
                          (("--preset", "tiny"), "--preset: a resumed run")):
        assert cli.main([*base, *more]) == 2
        err = errors(capsys)
        assert len(err) == 1 and message in err[0], err
    assert cli.main([*base, "--set", "steps=5"]) == 0
    out = capsys.readouterr()
    assert "resuming" in out.err and "from step 3 of 5" in out.err
    assert "step 5:" in out.out
    ck = load_checkpoint(ckpt)
    assert ck["step"] == 5 and ck["model_config"]["n_embd"] == 32
    other = text.with_name("other.txt")
    other.write_text(text.read_text() + "x")
    assert cli.main([*base, "--set", "steps=6", "--data", str(other)]) == 2
    assert "is not the text the checkpoint was trained on" in errors(
        capsys)[0]


def test_non_checkpoint_files_and_crafted_configs(tmp_path, capsys,
                                                  one_thread):
    import torch
    from transformer.model import GPT, GPTConfig
    from transformer.checkpoint import _digest, save_checkpoint
    evil = tmp_path / "evil.pt"
    torch.save({"x": argparse.Namespace()}, evil)
    (tmp_path / "text.pt").write_text("not a checkpoint")
    for f in (evil, tmp_path / "text.pt"):
        for verb in ("eval", "sample"):
            assert cli.main([verb, "--checkpoint", str(f)]) == 2
            err = errors(capsys)
            assert len(err) == 1 and "not a checkpoint written by" in err[0]
            assert "weights_only" not in err[0]
    big = tmp_path / "big.pt"
    model = GPT(GPTConfig(vocab_size=300, block_size=8, n_layer=1,
                          n_head=1, n_embd=8))
    save_checkpoint(big, model, step=1)
    for field, value in (("n_layer", 10**6), ("vocab_size", 10**12)):
        ck = torch.load(big, weights_only=True)
        ck["model_config"][field] = value
        ck.pop("digest")
        ck["digest"] = _digest(ck)
        torch.save(ck, tmp_path / "crafted.pt")
        t0 = time.perf_counter()
        assert cli.main(["sample", "--checkpoint",
                         str(tmp_path / "crafted.pt")]) == 2
        assert time.perf_counter() - t0 < 10
        err = errors(capsys)
        assert len(err) == 1 and ("does not describe" in err[0]
                                  or "n_layer = 1000000" in err[0]), err


# ------------------------------------------------------------ experiments

def test_experiment_ids_and_roots(tmp_path, capsys):
    for argv, message in ((["E99"], "unknown id 'E99'"),
                          (["E10", "--root", __file__], "is a file")):
        assert cli.main(["experiment", *argv]) == 2
        err = errors(capsys)
        assert len(err) == 1 and message in err[0], err
    # lower case is accepted; smoke records live apart, under ROOT/smoke
    assert cli.main(["experiment", "e12", "--smoke", "--root",
                     str(tmp_path)]) == 0
    assert sorted(p.relative_to(tmp_path).as_posix()
                  for p in tmp_path.rglob("*.json")) == [
        "smoke/E12/probe=-_seed=0.json", "smoke/E12/probe=-_seed=1.json"]
    capsys.readouterr()
    assert cli.main(["experiment", "--list", "--root", str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    ids = [line.split()[0] for line in listed]
    from transformer.reproduce import REPRODUCE
    n = len(ids) - len(REPRODUCE)  # the experiments, then the items
    assert ids[n:] == list(REPRODUCE)
    assert ids[:n] == sorted(ids[:n], key=lambda i: int(i[1:]))  # E1, E2
    assert "(0/3 runs)" in next(ln for ln in listed if ln.startswith("E12"))
    assert cli.main(["experiment", "--list", "--smoke", "--root",
                     str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "(2/2 runs)" in next(ln for ln in listed if ln.startswith("E12"))


def test_experiment_plan_counts_done_stale_and_missing(tmp_path, capsys):
    """--plan runs nothing and says, per experiment, what a run would do:
    after half a grid, the other half missing; a record edited so that it
    no longer matches its declaration is stale, an unreadable one too."""
    from transformer.ablations import EXPERIMENTS
    n = len(EXPERIMENTS["E5"].smoke().points())
    assert cli.main(["experiment", "E5", "--smoke", "--shard", "1/2",
                     "--root", str(tmp_path)]) == 0
    capsys.readouterr()

    def plan():
        before = sorted(tmp_path.rglob("*"))
        assert cli.main(["experiment", "E5", "--plan", "--smoke",
                         "--root", str(tmp_path)]) == 0
        assert sorted(tmp_path.rglob("*")) == before  # nothing ran
        return capsys.readouterr().out.splitlines()

    done = len(list(tmp_path.rglob("*.json")))
    assert plan()[0] == (f"E5   {done}/{n} done, 0 stale, {n - done} "
                         f"missing; one commit")
    first, second = sorted(tmp_path.rglob("*.json"))[:2]
    rec = json.loads(first.read_text())
    rec["train_config"]["lr"] *= 2  # no longer the declared point
    first.write_text(json.dumps(rec))
    second.write_text("{ half a record")
    lines = plan()
    assert lines[0].startswith(f"E5   {done - 2}/{n} done, 2 stale, "
                               f"{n - done} missing"), lines
    assert lines[-1].startswith("left: about "), lines
    assert cli.main(["experiment", "--plan", "--smoke", "--root",
                     str(tmp_path)]) == 0  # no id: every experiment
    ids = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()[:-1]]
    assert ids == sorted(EXPERIMENTS, key=lambda i: int(i[1:]))


def test_experiment_shards_split_a_grid(tmp_path, capsys):
    """--shard 1/2 and 2/2 run disjoint halves of a grid, which together
    are the whole grid; a bad --shard is one line and exit 2."""
    from transformer.ablations import EXPERIMENTS
    for bad in ("0/2", "3/2", "2", "a/b"):
        assert cli.main(["experiment", "E5", "--smoke", "--shard", bad,
                         "--root", str(tmp_path)]) == 2
        err = errors(capsys)
        assert len(err) == 1 and "--shard" in err[0], err
    names = []
    for k in (1, 2):
        before = set(tmp_path.rglob("*.json"))
        assert cli.main(["experiment", "E5", "--smoke", "--shard",
                         f"{k}/2", "--root", str(tmp_path)]) == 0
        names.append({p.name for p in set(tmp_path.rglob("*.json"))
                      - before})
    points = EXPERIMENTS["E5"].smoke().points()
    assert names[0] and names[1] and not names[0] & names[1]
    assert len(names[0]) + len(names[1]) == len(points)


# ------------------------------------------------------------------ sample

def test_sample_writes_any_text_to_any_stdout_encoding(tmp_path):
    ckpt = tmp_path / "c.pt"
    assert cli.main(["train", *TINY, "--set", "steps=1",
                     "--checkpoint", str(ckpt)]) == 0
    prompt = "ROMEO \u65e5\u672c \udcff"  # CJK, and a lone surrogate
    for encoding in ("utf-8:strict", "ascii:strict", "latin-1:strict"):
        env = dict(os.environ, PYTHONIOENCODING=encoding)
        result = subprocess.run(
            [sys.executable, "-m", "transformer", "sample", "--checkpoint",
             str(ckpt), "--prompt", prompt, "--max-new-tokens", "20",
             "--threads", "1"], capture_output=True, env=env, timeout=120)
        assert result.returncode == 0, result.stderr.decode()[-300:]
        assert result.stdout.startswith(b"ROMEO ")
        assert result.stderr == b""


# ---------------------------------------------------------------- signals

def wait_for(predicate, proc, timeout=120):
    t0 = time.perf_counter()
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.perf_counter() - t0 < timeout
        time.sleep(0.05)


def interactive():
    """In the child: SIGINT as an interactive shell leaves it (the test
    suite itself may run with it ignored, as a background job does)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_training(ckpt, steps=100_000, *more):
    return subprocess.Popen(
        [sys.executable, "-m", "transformer", "train", *TINY,
         "--set", f"steps={steps}", "--set", "checkpoint_interval=3",
         "--set", "eval_interval=1000", "--checkpoint", str(ckpt), *more],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=interactive)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130),
                                       (signal.SIGTERM, 143)])
def test_sigint_and_sigterm_save_a_whole_step_and_say_which(sig, code,
                                                            tmp_path):
    from transformer.checkpoint import load_checkpoint
    ckpt = tmp_path / "c.pt"
    proc = start_training(ckpt)
    wait_for(ckpt.exists, proc)  # training has started
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    line = err.strip().splitlines()[-1]
    step = int(re.search(r"holds step (\d+)", line).group(1))
    assert f"interrupted by {signal.Signals(sig).name}" in line
    ck = load_checkpoint(ckpt)
    assert ck["step"] == step and len(ck["history"]["train_loss"]) == step
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def test_sigkill_loses_at_most_checkpoint_interval_steps(tmp_path,
                                                         capsys,
                                                         one_thread):
    """kill -9 cannot be caught: the last periodic checkpoint survives
    whole, and resuming from it ends exactly where an uninterrupted run
    ends."""
    from transformer.checkpoint import load_checkpoint
    ckpt = tmp_path / "c.pt"
    proc = start_training(ckpt, 60)
    wait_for(lambda: ckpt.exists() and load_checkpoint(ckpt)["step"] >= 6,
             proc)
    proc.kill()
    proc.wait(timeout=60)
    done = load_checkpoint(ckpt)["step"]
    assert done % 3 == 0 and done < 60  # a periodic, whole checkpoint
    argv = ["train", *TINY, "--set", "steps=60", "--set",
            "checkpoint_interval=3", "--set", "eval_interval=1000"]
    assert cli.main([*argv[:1], "--resume", "--checkpoint", str(ckpt),
                     "--no-progress", "--threads", "1"]) == 0
    straight = tmp_path / "straight.pt"
    assert cli.main([*argv, "--checkpoint", str(straight)]) == 0
    a, b = load_checkpoint(ckpt), load_checkpoint(straight)
    assert a["history"]["train_loss"] == b["history"]["train_loss"]


def test_ctrl_c_keeps_what_sample_printed(tmp_path, one_thread):
    ckpt = tmp_path / "c.pt"
    assert cli.main(["train", *TINY, "--set", "steps=1",
                     "--checkpoint", str(ckpt)]) == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer", "sample", "--checkpoint",
         str(ckpt), "--prompt", "ROMEO:", "--max-new-tokens", "10000000",
         "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=interactive)
    first = proc.stdout.read(20)  # streamed: text arrives while it runs
    assert first.startswith(b"ROMEO:")
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert rest.endswith(b"\n")
    assert re.fullmatch(rb"interrupted after \d+ new tokens\n", err), err


# ----------------------------------------------------------------- device

def test_train_then_sample_end_to_end(tmp_path, capsys, one_thread):
    path = tmp_path / "run.pt"
    code = cli.main(["train", *TINY, "--set", "steps=2",
                     "--checkpoint", str(path), "--device", "cpu"])
    assert code == 0 and path.is_file()
    assert "step 2: train loss" in capsys.readouterr().out
    code = cli.main(["sample", "--checkpoint", str(path), "--prompt",
                     "ROMEO:", "--max-new-tokens", "5", "--top-k", "5",
                     "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("ROMEO:")
    assert cli.main(["sample", "--checkpoint",
                     str(tmp_path / "nope.pt")]) == 2
    assert cli.main(["sample", "--checkpoint", str(path),
                     "--top-p", "2"]) == 2
    assert cli.main(["sample"]) == 2  # --checkpoint is required
