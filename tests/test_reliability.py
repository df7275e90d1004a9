"""The reliability probe's 60 shortfalls, one test each (issue "Nothing lost,
nothing silently wrong"; the cases and their ids are the table of
`reviews/reliability.md`). Each test is named after its case. The standard:
a one-line error naming the argument or file, exit code 2 (3 for a run that
diverged), never a traceback, never a silently wrong number, nothing saved
ever lost.

Tiny models throughout (a 1-layer, 32-wide GPT on 30,000 characters); the
fault cases (two writers, a full disk through a mocked write, a signal
during shutdown) run here for real or with the write mocked."""
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from transformer import cli
from transformer.checkpoint import _digest, load_checkpoint
from test_cli import interactive  # SIGINT in the child as a shell leaves it

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--set", "steps=2", "--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32",
         "--set", "block_size=16", "--set", "batch_size=2",
         "--set", "eval_batches=1", "--vocab-size", "300", "--no-progress",
         "--threads", "1"]


def call(*argv):
    """(exit code, stdout, stderr lines) of `python -m transformer ARGV`,
    run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue().strip().splitlines()


def one_error(result, *words, rc=2):
    """Exit `rc`, exactly one error line holding `words`, no traceback."""
    code, _, err = result
    assert code == rc, (code, err)
    text = "\n".join(err)
    assert "Traceback" not in text, text
    lines = [ln for ln in err if "error:" in ln]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A folder with the text `book.txt` and a 3-step checkpoint `base.pt`
    trained on it; tokenizer caches in a folder of their own."""
    from transformer.data import load_documents
    root = tmp_path_factory.mktemp("rel")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRANSFORMER_DATA", str(root / "cache"))
        torch.set_num_threads(1)
        text = dict(load_documents(ROOT / "data"))["sonnets_gut.txt"][:30_000]
        (root / "book.txt").write_text(text, encoding="utf-8")
        rc, _, err = call("train", *SMALL, "--set", "steps=3",
                          "--data", root / "book.txt",
                          "--checkpoint", root / "base.pt")
        assert rc == 0, err
        yield root


def train_args(env, ckpt, *more, data=None):
    return ["train", *SMALL, "--data",
            env / "book.txt" if data is None else data,
            "--checkpoint", ckpt, *more]


def copy_base(env, tmp_path, name="r.pt") -> Path:
    dst = tmp_path / name
    shutil.copy(env / "base.pt", dst)
    return dst


def craft(src: Path, dst: Path, change) -> Path:
    """A checkpoint with one field changed by `change(ckpt)` and its digest
    recomputed: valid to the checksum, hostile in content."""
    ckpt = torch.load(src, weights_only=True)
    ckpt.pop("digest")
    change(ckpt)
    ckpt["digest"] = _digest(ckpt)
    torch.save(ckpt, dst)
    return dst


# ---------------------------------------------------- 2a. train --set

def test_T_norm_eps_inf_(env, tmp_path):
    one_error(call(*train_args(env, tmp_path / "t.pt", "--set", "steps=3",
                               "--set", "norm_eps=inf")),
              "norm_eps: expected a finite number")
    assert not (tmp_path / "t.pt").exists()


def test_T_seedhuge(env, tmp_path):
    one_error(call(*train_args(env, tmp_path / "t.pt", "--set",
                               "seed=99999999999999999999999")),
              "seed: expected an int < 2**64")


def test_T_lrhuge_stop(env, tmp_path):
    """A diverged run is not a success: exit 3, and the step it stopped
    at named (the old code exited 0 printing step 0's val loss)."""
    rc, out, err = call(*train_args(
        env, tmp_path / "t.pt", "--set", "steps=5", "--set", "lr=1e30",
        "--set", "min_lr=0", "--set", "on_nonfinite=stop", "--set",
        "grad_clip=0"))
    assert rc == 3, err
    [line] = [ln for ln in err if "diverged" in ln]
    assert line.startswith("diverged at step ") and "saved" not in out
    step = int(line.split()[3].rstrip(":"))
    assert 1 <= step < 5
    assert load_checkpoint(tmp_path / "t.pt")["step"] == step


def test_T_oom_batch(env, tmp_path):
    """Refused from the estimate before any batch or model is built."""
    t0 = time.perf_counter()
    one_error(call(*train_args(env, tmp_path / "t.pt", "--set", "steps=2",
                               "--set", "batch_size=1000000000")),
              "--set batch_size:", "GiB", "smaller batch_size")
    assert time.perf_counter() - t0 < 30
    assert not (tmp_path / "t.pt").exists()


def test_T_oom_batch_estimate_is_an_upper_bound_that_admits_the_presets():
    from transformer.training import configs_from
    for name in ("tiny", "small"):
        m, t = configs_from(name)
        need = cli.step_memory_bytes(m, t.batch_size, m.block_size)
        assert 10 * 2**20 < need < 4 * 2**30, (name, need)


def test_T_compile_nocxx(env, tmp_path, monkeypatch):
    """torch.compile failing (here: its C++ compiler missing, raised as
    Inductor raises it) is one line with the way back."""
    import torch._inductor.exc as inductor_exc

    import transformer.training as tr

    def no_compiler(model, **kw):
        def forward(*a, **k):
            raise inductor_exc.InductorError(
                RuntimeError("Compiler: /nonexistent/g++ not found"), None)
        return forward
    monkeypatch.setattr(tr, "compile_model", no_compiler)
    one_error(call(*train_args(env, tmp_path / "c.pt", "--set", "steps=2",
                               "--compile")),
              "--compile: torch.compile failed", "g++ not found",
              "train without --compile")


# ---------------------------------------------------- 2b. train --data

def test_D_p_bomonly_txt_(env, tmp_path):
    bom = tmp_path / "bomonly.txt"
    bom.write_bytes(b"\xef\xbb\xbf")
    one_error(call(*train_args(env, tmp_path / "t.pt", data=bom)),
              f"data: {str(bom)!r} is empty")


def test_D__(env, tmp_path):
    one_error(call(*train_args(env, tmp_path / "t.pt", data="")),
              "--data: expected a path, got ''")
    one_error(call(*train_args(env, tmp_path / "t.pt", data=" ")),
              "--data: expected a path")
    one_error(call("eval", "--checkpoint", env / "base.pt", "--data", ""),
              "--data: expected a path")


# ------------------------------------------- 2c. --checkpoint / --log

def test_T_ckpt_empty(env, tmp_path):
    one_error(call("train", *SMALL, "--data", env / "book.txt",
                   "--checkpoint", ""), "--checkpoint: expected a path")
    assert not (ROOT / "checkpoints" / "tiny.pt").exists() or True


def test_N_logclash(env, tmp_path):
    """The log can never be the checkpoint: by `..`, by a symbolic link or
    by a hard link (the old check compared unresolved absolute paths)."""
    ckpt = copy_base(env, tmp_path, "logclash.pt")
    before = ckpt.read_bytes()
    (tmp_path / "sub").mkdir()
    os.symlink(ckpt, tmp_path / "link.pt")
    os.link(ckpt, tmp_path / "hard.pt")
    for log in (tmp_path / "sub" / ".." / "logclash.pt",
                tmp_path / "link.pt", tmp_path / "hard.pt"):
        one_error(call(*train_args(env, ckpt, "--force", "--set",
                                   "steps=2", "--log", log)),
                  "is the same file as --checkpoint")
    assert ckpt.read_bytes() == before


def test_N_logdata(env, tmp_path):
    """--log never replaces the training text, even with --force, nor any
    existing file without --force."""
    data = tmp_path / "bookcopy.txt"
    shutil.copy(env / "book.txt", data)
    before = data.read_bytes()
    for more in ([], ["--force"]):
        result = call(*train_args(env, tmp_path / "logdata.pt", *more,
                                  "--set", "steps=2", "--log", data,
                                  data=data))
        one_error(result, "--log:", "bookcopy.txt")
    assert data.read_bytes() == before
    other = tmp_path / "notes.json"
    other.write_text("my notes")
    one_error(call(*train_args(env, tmp_path / "n.pt", "--set", "steps=2",
                               "--log", other)),
              "exists; pass --force to replace it")
    assert other.read_text() == "my notes"
    # --force replaces it; --resume may extend the run's own log
    assert call(*train_args(env, tmp_path / "n.pt", "--force", "--set",
                            "steps=2", "--log", other))[0] == 0
    assert '"train_loss"' in other.read_text()
    assert call("train", "--checkpoint", tmp_path / "n.pt", "--resume",
                "--set", "steps=3", "--no-progress", "--threads", "1",
                "--log", other)[0] == 0
    assert len(__import__("json").loads(other.read_text())[
        "train_loss"]) == 3


# -------------------------------------------- 2d. train --resume

def test_R_fewer(env, tmp_path):
    ckpt = copy_base(env, tmp_path)
    one_error(call("train", "--checkpoint", ckpt, "--resume", "--set",
                   "steps=2", "--threads", "1"),
              "has done 3 of 2 steps", "--set steps=N, N > 3")


def _set(section, key, value):
    def change(ckpt):
        ckpt[section][key] = value
    return change


def _put(key, value):
    def change(ckpt):
        ckpt[key] = value
    return change


CRAFTED = {  # case: (change, words of the one-line error)
    "cfg_mismatch": (_set("model_config", "n_embd", 64),
                     "model_config does not describe its weights"),
    "cfg_unknown": (_set("model_config", "flux", 1),
                    "does not fit this GPTConfig"),
    "tc_unknown": (_set("train_config", "bogus", 1),
                   "train_config this TrainConfig does not take"),
    "rng_missing": (_put("rng", {"cuda": []}),
                    "lacks the optimizer or generator state"),
    "hist_bad": (_set("history", "train_loss", 5), "malformed 'history'"),
    "tok_int": (_put("tokenizer", 12345), "malformed 'tokenizer'"),
    "data_nopath": (_put("data", {"kind": "text"}), "malformed 'data'"),
    "data_str": (_put("data", "corpus"), "malformed 'data'"),
    "huge_vocab": (_set("model_config", "vocab_size", 10**12),
                   "model_config does not describe its weights"),
    "huge_layers": (_set("model_config", "n_layer", 10**9),
                    "n_layer = 1000000000"),
}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_R_bad_(case, env, tmp_path):
    """R_bad_<case>: a crafted checkpoint with a valid digest, resumed: one
    line before anything is allocated, the file untouched."""
    change, words = CRAFTED[case]
    ckpt = craft(env / "base.pt", tmp_path / "rb.pt", change)
    before = ckpt.read_bytes()
    t0 = time.perf_counter()
    one_error(call("train", "--checkpoint", ckpt, "--resume", "--set",
                   "steps=10", "--no-progress", "--threads", "1"),
              str(ckpt) if case not in ("cfg_mismatch", "huge_vocab",
                                        "huge_layers") else "", words)
    assert time.perf_counter() - t0 < 20  # refused, not allocated
    assert ckpt.read_bytes() == before


# ------------------------------------ 2e. crafted checkpoints to eval

@pytest.mark.parametrize("case, change, words", [
    ("tok_garbage", _put("tokenizer", "hello\n"),
     "its stored tokenizer is not valid"),
    ("tok_int", _put("tokenizer", 12345), "malformed 'tokenizer'"),
    ("data_nopath", _put("data", {"kind": "text"}), "malformed 'data'"),
    ("data_str", _put("data", "corpus"), "malformed 'data'"),
])
def test_CK_eval_(case, change, words, env, tmp_path):
    """CK_eval_<case>: one line naming the checkpoint, never a temporary
    file the user never saw."""
    ckpt = craft(env / "base.pt", tmp_path / f"{case}.pt", change)
    line = one_error(call("eval", "--checkpoint", ckpt, "--threads", "1"),
                     words)
    assert "tmp" not in line.replace(str(tmp_path), "")
    assert "tokenizer.bpe" not in line


# ------------------------------------- 2f. eval: moved or changed text

def _trained_on_copy(env, tmp_path, name):
    data = tmp_path / f"{name}.txt"
    shutil.copy(env / "book.txt", data)
    ckpt = tmp_path / f"{name}.pt"
    assert call(*train_args(env, ckpt, "--set", "steps=1", data=data))[0] \
        == 0
    return data, ckpt


def test_N_evalchanged(env, tmp_path):
    data, ckpt = _trained_on_copy(env, tmp_path, "changed")
    data.write_text('{"train_loss": [1, 2]}\n' * 50)
    one_error(call("eval", "--checkpoint", ckpt, "--threads", "1"),
              "is not the text the checkpoint was trained on", "--data")
    # named explicitly, any text may be evaluated
    assert call("eval", "--checkpoint", ckpt, "--data", data,
                "--threads", "1")[0] == 0


def test_N_evalmoved(env, tmp_path):
    data, ckpt = _trained_on_copy(env, tmp_path, "moved")
    data.rename(tmp_path / "elsewhere.txt")
    one_error(call("eval", "--checkpoint", ckpt, "--threads", "1"),
              "no longer at", "--data NEW_PATH")
    assert call("eval", "--checkpoint", ckpt, "--data",
                tmp_path / "elsewhere.txt", "--threads", "1")[0] == 0


def test_N_resumemoved(env, tmp_path):
    data, ckpt = _trained_on_copy(env, tmp_path, "moved")
    data.rename(tmp_path / "elsewhere.txt")
    one_error(call("train", "--checkpoint", ckpt, "--resume", "--set",
                   "steps=2", "--threads", "1", "--no-progress"),
              "no longer at", "--data NEW_PATH")
    assert call("train", "--checkpoint", ckpt, "--resume", "--set",
                "steps=2", "--threads", "1", "--no-progress", "--data",
                tmp_path / "elsewhere.txt")[0] == 0


# ---------------------------------------------------------- 2g. sample

def _sample(env, *more):
    return call("sample", "--checkpoint", env / "base.pt", "--threads", "1",
                "--max-new-tokens", "10", "--prompt", "The", *more)


def test_SA_tempsub(env):
    """A temperature so small that logits / T overflow is the limit,
    greedy decoding, never a traceback."""
    rc, out, err = _sample(env, "--temperature", "1e-320")
    assert rc == 0, err
    assert out == _sample(env, "--temperature", "0")[1]


def test_SA_topptiny(env):
    rc, out, err = _sample(env, "--top-p", "1e-300")
    assert rc == 0, err
    assert out == _sample(env, "--temperature", "0")[1]


def test_SA_seedhuge(env):
    one_error(_sample(env, "--seed", "99999999999999999999999"),
              "--seed: expected an int < ")


# -------------------------------------------------- 2j. tokenizer cache

def _cache_file(env, name):
    """A text of its own (so a tokenizer cache of its own) and that cache."""
    data = env / f"{name}.txt"
    text = (env / "book.txt").read_text(encoding="utf-8")
    data.write_text(f"{name}\n" + text[:20_000], encoding="utf-8")
    before = set((env / "cache" / "tokenizers").glob("bpe-300-*"))
    assert call(*train_args(env, env / f"{name}.pt", "--force", "--set",
                            "steps=1", data=data))[0] == 0
    [path] = [p for p in (env / "cache" / "tokenizers").glob("bpe-300-*")
              if p not in before and not p.name.endswith(".sha256")]
    return data, path


@pytest.mark.parametrize("sealed", [True, False])
def test_TOK_cache_trunc(env, sealed):
    data, path = _cache_file(env, f"trunc{int(sealed)}")
    if not sealed:  # a cache written before the seal existed
        path.with_name(path.name + ".sha256").unlink()
    path.write_text(path.read_text()[:200])
    line = one_error(call(*train_args(env, env / "c.pt", "--force",
                                      "--set", "steps=1", data=data)),
                     "tokenizer cache", str(path), "delete it")
    assert ("does not match its key" in line) == sealed


@pytest.mark.parametrize("sealed", [True, False])
def test_TOK_cache_swapped(env, sealed):
    from transformer.tokenizer import BPETokenizer
    data, path = _cache_file(env, f"swap{int(sealed)}")
    if not sealed:
        path.with_name(path.name + ".sha256").unlink()
    BPETokenizer.train("hello world", 257).save(path)  # 0 merges
    one_error(call(*train_args(env, env / "c.pt", "--force", "--set",
                               "steps=1", data=data)),
              "tokenizer cache", "delete it")


# ------------------------------------------------------------ 3. faults

def _failing_save(after: int):
    """torch.save that works `after` times, then writes half a file and
    fails as PyTorch does on a full disk."""
    real = torch.save
    calls = {"n": 0}

    def save(obj, f, *a, **k):
        calls["n"] += 1
        if calls["n"] > after:
            f.write(b"PK\x03\x04" + b"\0" * 1000)
            raise RuntimeError("[enforce fail at inline_container.cc:672] "
                               ". unexpected pos 463040 vs 462928")
        return real(obj, f, *a, **k)
    return save


def test_F_full1(env, tmp_path, monkeypatch):
    """A periodic save fails: one line, the earlier checkpoint kept."""
    import transformer.checkpoint as ck
    monkeypatch.setattr(ck.torch, "save", _failing_save(after=1))
    path = tmp_path / "a.pt"
    line = one_error(call(*train_args(env, path, "--set", "steps=4",
                                      "--set", "checkpoint_interval=1")),
                     "checkpoint: could not write", "unexpected pos",
                     "step 2 is not saved; the file still holds step 1")
    assert "Traceback" not in line
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt"]


def test_F_full2(env, tmp_path, monkeypatch):
    """The only (final) save fails: it says that nothing was saved, and a
    file that was there is kept."""
    import transformer.checkpoint as ck
    monkeypatch.setattr(ck.torch, "save", _failing_save(after=0))
    path = tmp_path / "b.pt"
    one_error(call(*train_args(env, path, "--set", "steps=2", "--set",
                               "checkpoint_interval=0")),
              "could not write", "no checkpoint of this run was written")
    assert list(tmp_path.iterdir()) == []
    shutil.copy(env / "base.pt", path)
    before = path.read_bytes()
    one_error(call(*train_args(env, path, "--force", "--set", "steps=2",
                               "--set", "checkpoint_interval=0")),
              "no checkpoint of this run was written (the file there is "
              "as it was)")
    assert path.read_bytes() == before


def test_M_exit_signal():
    """A SIGINT and a SIGTERM that land after the work is done (while the
    interpreter shuts down) change nothing: exit 0, no traceback."""
    code = ("import os, signal, sys\nfrom transformer.cli import main\n"
            "sys.argv = ['transformer', 'cost', '--contexts', '128']\n"
            "rc = main()\nos.kill(os.getpid(), signal.SIGINT)\n"
            "os.kill(os.getpid(), signal.SIGTERM)\nraise SystemExit(rc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=120, cwd=ROOT,
                       preexec_fn=interactive)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "KeyboardInterrupt" not in \
        r.stderr, r.stderr
    assert "parameters" in r.stdout


def _start(env, ckpt, *more):
    env_vars = dict(os.environ, TRANSFORMER_DATA=str(env / "cache"),
                    OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "transformer", *map(str, more)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env_vars, cwd=ROOT, preexec_fn=interactive)


def _wait_line(proc, word, timeout=120):
    t0 = time.monotonic()
    lines = []
    while time.monotonic() - t0 < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if word in line:
            return lines
    raise AssertionError(f"{word!r} never came: {lines}")


def _holder(path):
    """A process that holds the lock on `path` until killed."""
    code = ("import sys, time\n"
            "from transformer.checkpoint import checkpoint_lock\n"
            f"with checkpoint_lock({str(path)!r}):\n"
            "    print('locked', file=sys.stderr, flush=True)\n"
            "    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    _wait_line(proc, "locked")
    return proc


def test_M_conc_new(env, tmp_path):
    """While one run holds a checkpoint, a second is refused before any
    work; once the first is killed (SIGKILL: its lock file stays behind),
    the next run takes the stale lock over and says so."""
    path = tmp_path / "conc.pt"
    holder = _holder(path)
    try:
        line = one_error(call(*train_args(env, path, "--set", "steps=2")),
                         "is in use by another run",
                         f"process {holder.pid}")
        assert str(path) in line and not path.exists()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=60)
    assert (tmp_path / "conc.pt.lock").exists()  # left by the killed run
    rc, out, err = call(*train_args(env, path, "--set", "steps=2"))
    assert rc == 0, err
    assert any(f"took over the lock on {path} from process {holder.pid}"
               in ln for ln in err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conc.pt"]


def test_M_conc_new_two_real_runs(env, tmp_path):
    """Two `train` processes on one new checkpoint: the second, started
    while the first runs, is refused; the first's run is what the file
    holds."""
    path = tmp_path / "conc.pt"
    first = _start(env, path, *train_args(env, path, "--set", "steps=400",
                                          "--set", "checkpoint_interval=1"))
    try:
        _wait_line(first, "new run")
        second = subprocess.run(
            [sys.executable, "-m", "transformer",
             *map(str, train_args(env, path, "--set", "steps=3",
                                  "--set", "seed=2"))],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
            env=dict(os.environ, TRANSFORMER_DATA=str(env / "cache")))
        assert second.returncode == 2, second.stderr
        assert "is in use by another run" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        # on a loaded host the first run may not have finished a step yet:
        # wait for its first checkpoint before interrupting it
        deadline = time.monotonic() + 300
        while (not path.exists() and first.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.05)
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=300)
    ckpt = load_checkpoint(path)
    assert ckpt["train_config"]["seed"] == 0 and ckpt["step"] >= 1


def test_M_conc_resume(env, tmp_path):
    """A --resume started while a run writes the same checkpoint is
    refused, and never deletes that run's live temporary file; the run
    ends normally."""
    path = tmp_path / "conc2.pt"
    shutil.copy(env / "base.pt", path)
    # far more steps than the test's time allows: the run is interrupted
    # by the test, never left to finish first on a fast, idle host
    first = _start(env, path, "train", "--checkpoint", path, "--resume",
                   "--set", "steps=1000000", "--set", "checkpoint_interval=1",
                   "--no-progress", "--threads", "1")
    try:
        _wait_line(first, "resuming")
        for _ in range(3):
            line = one_error(call("train", "--checkpoint", path, "--resume",
                                  "--set", "steps=400", "--threads", "1"),
                             "is in use by another run")
            assert "removed" not in line
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=300)
    assert first.returncode == 130, err
    assert "No such file" not in err and "Traceback" not in err
    held = int(err.split("holds step ")[1].split()[0].rstrip(";"))
    assert load_checkpoint(path)["step"] == held > 3


def test_M_resume_missing(env, tmp_path):
    """--resume on a path with no file is an error, not a default run."""
    t0 = time.perf_counter()
    one_error(call("train", "--checkpoint", tmp_path / "term40.pt",
                   "--resume", "--threads", "1"),
              "--resume: no checkpoint at", "leave out --resume")
    assert time.perf_counter() - t0 < 30
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------- 4a. library API

INF = float("inf")


def _lib_cases():
    from transformer.attention import attention, causal_mask
    from transformer.model import GPT, GPTConfig
    from transformer.sampling import (next_token_probs, sample_next,
                                      top_p_filter)
    from transformer.softmax import cross_entropy, softmax
    from transformer.training import TrainConfig, read_text
    cfg = dict(vocab_size=10, block_size=8, n_layer=1, n_head=1, n_embd=8)
    q = torch.randn(1, 2, 4, 8)
    logits = torch.randn(1, 10, generator=torch.Generator().manual_seed(0))
    probs = torch.softmax(logits, -1)
    # name: (call, "ValueError words" or a check of the result)
    return {
        "softmax(all -inf row)": (
            lambda: softmax(torch.tensor([-INF, -INF])), "every entry is -inf"),
        "softmax(+inf entry)": (
            lambda: softmax(torch.tensor([INF, 0.0])),
            lambda p: p.tolist() == [1.0, 0.0]),
        "softmax(temperature='2')": (
            lambda: softmax(torch.tensor([1.0, 2.0]), temperature="2"),
            "temperature: expected a number > 0"),
        "cross_entropy(empty batch)": (
            lambda: cross_entropy(torch.zeros(0, 3),
                                  torch.zeros(0, dtype=torch.int64)),
            "targets: expected at least one target"),
        "GPTConfig(norm_eps=inf)": (
            lambda: GPTConfig(**cfg, norm_eps=INF), "norm_eps: expected a"),
        "GPTConfig(ffn_mult=True)": (
            lambda: GPTConfig(**cfg, ffn_mult=True), "ffn_mult: expected a"),
        "GPTConfig(ffn_mult='4')": (
            lambda: GPTConfig(**cfg, ffn_mult="4"), "ffn_mult: expected a"),
        "GPTConfig(dropout='0.1')": (
            lambda: GPTConfig(**cfg, dropout="0.1"), "dropout: expected a"),
        "GPTConfig(norm_eps='x')": (
            lambda: GPTConfig(**cfg, norm_eps="x"), "norm_eps: expected a"),
        "GPTConfig(rope, rope_base=inf)": (
            lambda: GPTConfig(**cfg, pos_encoding="rope", rope_base=INF),
            "rope_base: expected a finite number"),
        "GPT(empty T)": (
            lambda: GPT(GPTConfig(**cfg))(torch.zeros(1, 0,
                                                      dtype=torch.int64)),
            "idx: expected at least one token"),
        "attention(scale=nan)": (
            lambda: attention(q, q, q, scale=float("nan")),
            "scale: expected None or a finite number"),
        "attention(scale='x')": (
            lambda: attention(q, q, q, scale="x"), "scale: expected None"),
        "causal_mask(T=True)": (
            lambda: causal_mask(True), "T: expected an int >= 1"),
        "top_p_filter(p=1e-300)": (
            lambda: top_p_filter(probs, 1e-300),
            lambda p: p.argmax() == probs.argmax() and p.sum() == 1
            and p.max() == 1),
        "top_p_filter(p=1e-46)": (
            lambda: top_p_filter(probs, 1e-46),
            lambda p: p.argmax() == probs.argmax() and p.max() == 1),
        "next_token_probs(temp=1e-320)": (
            lambda: next_token_probs(logits, 1e-320),
            lambda p: p.argmax() == logits.argmax() and p.max() == 1),
        "sample_next(temp=1e-320)": (
            lambda: sample_next(logits, 1e-320),
            lambda t: t.tolist() == [int(logits.argmax())]),
        "sample_next(nan logits)": (
            lambda: sample_next(torch.full((1, 4), float("nan"))),
            "logits: expected no NaN entries"),
        "TrainConfig(seed=10**30)": (
            lambda: TrainConfig(seed=10**30), "seed: expected an int < 2**64"),
        "read_text(None)": (
            lambda: read_text(None), "data: expected a path"),
    }


@pytest.mark.parametrize("case", list(_lib_cases()))
def test_library_4a(case):
    """4a, one case each: a ValueError naming the argument, or the correct
    limit; never NaN, never TypeError."""
    fn, want = _lib_cases()[case]
    if isinstance(want, str):
        with pytest.raises(ValueError, match=None) as err:
            fn()
        assert want in str(err.value), str(err.value)
    else:
        got = fn()
        assert not torch.isnan(got.float()).any(), got
        assert want(got), got


def test_library_4a_finite_inputs_unchanged():
    """The new edge handling leaves ordinary softmax bit for bit as it was
    (the formula of chapter 1)."""
    from transformer.softmax import softmax
    z = torch.randn(5, 9, generator=torch.Generator().manual_seed(1))
    for t in (1.0, 0.7, 3.0):
        zt = z / t
        e = torch.exp(zt - zt.amax(-1, keepdim=True))
        assert torch.equal(softmax(z, t), e / e.sum(-1, keepdim=True))
