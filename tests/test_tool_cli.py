"""The tools' command lines (tools/tool_cli.py): bad input gets one line on
stderr naming the argument and what was expected, exit code 2, no
traceback, before any work; --help exits 0. Every tool with a parser builds
it through tool_cli, so the shared options are checked the same way."""
import argparse
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tool_cli  # tools/, put on sys.path by the root conftest.py

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"

# (tool, arguments, the option the one-line error must name), each run as
# `python tools/TOOL ARGS`; each exits at parsing, so none does any work
BAD = [
    ("bench.py", ["--name", "x", "--stmt", "pass", "--repeat", "0"],
     "--repeat"),
    ("bench.py", ["--name", "x", "--stmt", "pass", "--threads", "-1"],
     "--threads"),
    ("bench_training.py", ["--warmup", "-1"], "--warmup"),
    ("training_results.py", ["bigram", "--seeds", "-1"], "--seeds"),
    ("book_numbers.py", ["--chek"], "--chek"),
    ("run_lookup.py", ["ladder", "--shard", "0/2"], "--shard"),
]
# the same, in this process: main(argv) parses before any work, and these
# tools' imports change nothing that matters here (bench_training.py, which
# points torch.compile's cache at a new folder when imported, runs only as
# a subprocess)
BAD_IN_PROCESS = [
    ("training_results", ["e10", "--steps", "0"], "--steps"),
    ("training_results", ["e10", "--threads", "x"], "--threads"),
    ("training_results", ["bigram", "--set", "no_such_field=1"], "--set"),
    ("measure_read_peak", ["--trials", "0"], "--trials"),
    ("attention_time", ["--contexts", "64,x"], "--contexts"),
    ("bench", ["--name", "x", "--stmt", "pass", "--repeat", "x"],
     "--repeat"),
    ("bench", ["--name", "x", "--stmt", "pass", "--number", "0"],
     "--number"),
    ("book_numbers", ["--check", "extra"], "extra"),
    ("bridge_e15b", ["--steps", "0"], "--steps"),
]
HELP = ["bench_training.py", "book_numbers.py"]  # and in-process below
HELP_IN_PROCESS = ["bench", "training_results"]


def _run(tool, args):
    return subprocess.Popen([sys.executable, str(TOOLS / tool), *args],
                            cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def runs():
    """Every command started at once (each pays its tool's imports, not
    its work), then collected: {key: (returncode, stdout, stderr)}."""
    started = {("bad", i): _run(tool, args)
               for i, (tool, args, _) in enumerate(BAD)}
    started.update({("help", tool): _run(tool, ["--help"]) for tool in HELP})
    done = {}
    for key, proc in started.items():
        out, err = proc.communicate(timeout=120)
        done[key] = (proc.returncode, out, err)
    return done


@pytest.mark.parametrize("i", range(len(BAD)),
                         ids=[f"{t} {' '.join(a)}" for t, a, _ in BAD])
def test_bad_argument_one_line_exit_2(runs, i):
    tool, _, option = BAD[i]
    code, out, err = runs[("bad", i)]
    assert code == 2, (code, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{tool}: error: "), lines[0]
    assert option in lines[0], lines[0]


@pytest.mark.parametrize("tool", HELP)
def test_help_exits_0(runs, tool):
    code, out, err = runs[("help", tool)]
    assert code == 0, err
    assert out.startswith("usage: ") and "Traceback" not in err


@pytest.mark.parametrize("module", HELP_IN_PROCESS)
def test_help_exits_0_in_process(capsys, module):
    with pytest.raises(SystemExit) as e:
        importlib.import_module(module).main(["--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")


@pytest.mark.parametrize("module, args, option", BAD_IN_PROCESS)
def test_bad_argument_in_process(capsys, module, args, option):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], lines


def test_int_at_least():
    check = tool_cli.int_at_least(1)
    assert check("3") == 3
    for text, said in (("0", "got 0"), ("-2", "got -2"), ("x", "got 'x'"),
                       ("1.5", "got '1.5'")):
        with pytest.raises(argparse.ArgumentTypeError,
                           match=re.escape(f"expected an int >= 1, {said}")):
            check(text)
    with pytest.raises(argparse.ArgumentTypeError, match="< 4, got 4"):
        tool_cli.int_at_least(0, below=4)("4")


def test_int_list():
    assert tool_cli.int_list(1)("64,128") == [64, 128]
    for text in ("", "0,64", "64,x"):
        with pytest.raises(argparse.ArgumentTypeError):
            tool_cli.int_list(1)(text)


def test_shared_options_one_line_errors(capsys):
    """The shared options, in-process: defaults, bounds, one error line."""
    p = tool_cli.parser("First line of the doc\ncontinued.\n\nNot this.")
    tool_cli.add_out(p, "out.json")
    tool_cli.add_threads(p)
    tool_cli.add_timing(p, warmup=2, repeat=8)
    tool_cli.add_quick(p)
    tool_cli.add_seed(p)
    args = p.parse_args([])
    assert (args.out, args.threads, args.warmup, args.repeat, args.quick,
            args.seed) == ("out.json", 1, 2, 8, False, 0)
    assert p.description == "First line of the doc\ncontinued."
    assert p.parse_args(["--warmup", "0"]).warmup == 0
    for bad in (["--threads", "0"], ["--repeat", "0"], ["--warmup", "-1"],
                ["--seed", "-1"], ["--no-such"]):
        with pytest.raises(SystemExit) as e:
            p.parse_args(bad)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert bad[0] in err


def test_every_tool_parser_comes_from_tool_cli():
    """No tool builds its own argparse.ArgumentParser: one spelling of the
    shared options, one error format."""
    own = [f.name for f in sorted(TOOLS.glob("*.py"))
           if f.name != "tool_cli.py"
           and "ArgumentParser(" in f.read_text(encoding="utf-8")]
    assert own == [], own


def test_the_build_tools_do_not_import_the_package():
    """tools/literate.py (the exporter) and tools/cell_policy.py parse their
    arguments through tool_cli but never import transformer/: they must run
    while the package they regenerate is stale or half exported (a class
    renamed in a chapter once broke the exporter that was to regenerate
    it)."""
    code = ("import sys; sys.path.insert(0, 'tools'); import literate, "
            "cell_policy; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] == 'transformer'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_training_results_e10_runs_end_to_end(capsys):
    """The e10 record's whole path, in process and a few steps long (the
    item `experiment training-e10` runs it at 300): every planted bug
    trains, is scored and printed; nothing is written."""
    import training_results
    out = training_results.run_e10(argparse.Namespace(steps=2))
    printed = capsys.readouterr().out
    assert set(out["runs"]) == set(training_results.BUGS)
    for name, run in out["runs"].items():
        assert len(run["train_loss"]) == 2, name
        assert f"e10 {name}: final corpus loss " in printed
