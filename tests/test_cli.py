"""Appendix "The command line": `python -m transformer` dispatches verbs."""
import subprocess
import sys

import pytest

from transformer import cli


def run(*args):
    return subprocess.run([sys.executable, "-m", "transformer", *args],
                          capture_output=True, text=True, timeout=300)


def test_help_lists_every_command():
    result = run("--help")
    assert result.returncode == 0
    for verb in cli.COMMANDS:
        assert verb in result.stdout


def test_unknown_command_is_a_usage_error_without_traceback():
    result = run("frobnicate")
    assert result.returncode == 2
    assert "unknown command 'frobnicate'" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_command_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "usage:" in capsys.readouterr().out


def test_cost_reaches_the_cost_model():
    result = run("cost", "--n-layer", "2", "--n-embd", "64", "--n-head", "4",
                 "--vocab-size", "100", "--contexts", "16")
    assert result.returncode == 0, result.stderr
    assert "parameters" in result.stdout


@pytest.mark.parametrize("verb", sorted(cli.COMMANDS))
def test_every_verb_resolves_to_a_function(verb):
    import importlib

    module, function, _ = cli.COMMANDS[verb]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError:
        pytest.fail(f"{verb}: module {module} is missing")
    assert callable(getattr(mod, function))
