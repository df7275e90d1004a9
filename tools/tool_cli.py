"""The tools' command line, written once: a parser built from a tool's
docstring, typed counts, and the options several tools share.

Bad input at the command line gets one line naming the argument and what
was expected, `PROG: error: argument --repeat: expected an int >= 1, got 0
(see --help)`, and exit code 2, before any work and never a traceback (the
package's own command line, transformer/cli_options.py, answers the same
way). A tool builds its parser with `parser(__doc__)` and adds a shared
option with one call (`add_out`, `add_threads`, `add_timing`, `add_quick`,
`add_seed`), so `--repeat` means the same thing, checked the same way, in
every tool that has it. Imports no torch: `--help` and a bad argument cost
only the tool's own imports.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["Parser", "parser", "int_at_least", "shard", "int_list", "add_out",
           "add_threads", "add_timing", "add_quick", "add_seed"]


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line, `PROG: error: MESSAGE (see
    --help)`, instead of a usage block and the message; exit code 2.
    Subcommands' parsers (add_subparsers) are of this class too."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def int_at_least(low: int, below: int | None = None):
    """An argparse `type`: the package's command line's own
    (transformer.cli_options.int_at_least), imported when a tool asks for
    it. Not at import: the build's own tools (literate.py, cell_policy.py)
    use this module and must run while transformer/ is stale or half
    exported, which is when they are needed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from transformer.cli_options import int_at_least as package_type
    return package_type(low, below)


def shard(text: str):
    """An argparse `type`: --shard K/N as the package's command line reads
    it (1 <= K <= N; transformer.cli_options.shard), imported when asked
    for, as int_at_least is."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from transformer.cli_options import shard as package_type
    return package_type(text)


def parser(doc: str | None, **kwargs) -> Parser:
    """A tool's parser, described by the first paragraph of `doc` (its
    module docstring); further keywords go to argparse.ArgumentParser."""
    first = (doc or "").strip().split("\n\n")[0].strip()
    return Parser(description=first or None, **kwargs)


def int_list(low: int = 1):
    """An argparse `type`: comma-separated ints, each >= low, as a
    non-empty list (a string default is converted the same way)."""
    def check(text: str) -> list[int]:
        try:
            values = [int(t) for t in text.split(",") if t.strip()]
        except ValueError:
            values = []
        if not values or min(values) < low:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated ints >= {low}, got {text!r}")
        return values
    return check


def add_out(p: argparse.ArgumentParser, default=None,
            help: str = "where the record is written", **kwargs):
    """--out PATH: where the tool writes (a file or a folder, as `help`
    says); `type=Path` and the like go through `kwargs`."""
    if default is not None:
        help += " (default: %(default)s)"
    return p.add_argument("--out", default=default, metavar="PATH",
                          help=help, **kwargs)


def add_threads(p: argparse.ArgumentParser, default: int = 1,
                help: str = "torch threads while it runs"):
    """--threads N, an int >= 1 (torch.set_num_threads)."""
    return p.add_argument("--threads", type=int_at_least(1),
                          default=default, metavar="N",
                          help=help + " (default: %(default)s)")


def add_timing(p: argparse.ArgumentParser, warmup: int, repeat: int,
               what: str = "runs") -> None:
    """--warmup N (untimed, an int >= 0) and --repeat N (timed, an int
    >= 1); `what` names the unit timed (runs, steps, ...)."""
    p.add_argument("--warmup", type=int_at_least(0), default=warmup,
                   metavar="N",
                   help=f"untimed {what} before timing (default: "
                        "%(default)s)")
    p.add_argument("--repeat", type=int_at_least(1), default=repeat,
                   metavar="N",
                   help=f"timed {what} (default: %(default)s)")


def add_quick(p: argparse.ArgumentParser,
              help: str = "a smoke test: a short run, its record "
                          "written under results/tmp/"):
    """--quick: a short run that checks the code path."""
    return p.add_argument("--quick", action="store_true", help=help)


def add_seed(p: argparse.ArgumentParser, default: int = 0,
             help: str = "random seed"):
    """--seed N, an int >= 0."""
    return p.add_argument("--seed", type=int_at_least(0), default=default,
                          metavar="N", help=help + " (default: %(default)s)")
