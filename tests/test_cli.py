"""Appendix "The command line": `python -m transformer` and its verbs.

Every usage error and bad file gives one line on stderr and exit code 2,
never a traceback; the tests run tiny configurations so the file takes
well under two minutes."""
import dataclasses
import os
import subprocess
import sys

import pytest

from transformer import cli

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
        fields = cli.source_fields(module, cls.__name__)
        want = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        assert {k: v[0] for k, v in fields.items()} == want
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                assert eval(fields[f.name][1]) == f.default, f.name
    assert cli.source_constant("training", "PRESETS") == {
        name: (dict(m), dict(t)) for name, (m, t) in PRESETS.items()}
    shape = cli.source_constant("cost_model", "GPT2_SMALL")
    assert shape == {k: getattr(GPT2_SMALL, k) for k in shape}


def test_parse_overrides_types_and_errors():
    got = cli.parse_overrides(["n_layer=2", "lr=0.01", "bias=false",
                               "seq_len=none", "norm=rmsnorm"])
    assert got == {"n_layer": 2, "lr": 0.01, "bias": False,
                   "seq_len": None, "norm": "rmsnorm"}
    for item, message in (("n_layers=2", "unknown field 'n_layers'"),
                          ("n_layer=two", "n_layer: expected an int"),
                          ("bias=maybe", "bias: expected a bool"),
                          ("steps", "expected FIELD=VALUE")):
        with pytest.raises(ValueError, match=message):
            cli.parse_overrides([item])


# ------------------------------------------------------------------- cost

def test_cost_prints_the_table(capsys):
    assert cli.main(["cost", "--n-layer", "2", "--contexts", "16,32"]) == 0
    out = capsys.readouterr().out
    assert "parameters" in out and "KV cache passes the weights" in out
    assert len([ln for ln in out.splitlines()
                if ln.strip().startswith(("16 ", "32 "))]) == 2


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


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "invalid choice: 'huge'"),
    (["--set", "n_layers=2"], "unknown field 'n_layers'"),
    (["--set", "steps=-1"], "steps: expected an int >= 0"),
    (["--set", "seq_len=4096"], "seq_len: expected <= the model's"),
    (["--set", "n_head=3"], "n_embd: expected a multiple of n_head"),
    (["--bogus"], "unrecognized arguments"),
    (["--threads", "0"], "--threads: expected an int >= 1"),
])
def test_train_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    assert cli.main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_train_then_sample_end_to_end(tmp_path, capsys):
    path = tmp_path / "run.pt"
    log = tmp_path / "log.json"
    code = cli.main(["train", *TINY, "--set", "steps=2",
                     "--checkpoint", str(path), "--log", str(log)])
    assert code == 0 and path.is_file() and log.is_file()
    assert "step 2: train loss" in capsys.readouterr().out
    code = cli.main(["sample", "--checkpoint", str(path), "--prompt",
                     "ROMEO:", "--max-new-tokens", "5", "--top-k", "5"])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("ROMEO:")
    assert cli.main(["sample", "--checkpoint",
                     str(tmp_path / "nope.pt")]) == 2
    assert cli.main(["sample", "--checkpoint", str(path),
                     "--top-p", "2"]) == 2
    assert cli.main(["sample"]) == 2  # --checkpoint is required
