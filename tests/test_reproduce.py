"""Appendix "The command line", section "Everything else the book reads":
the records outside the grids, declared in `transformer.reproduce.REPRODUCE`
and run by `python -m transformer experiment all` after the grids.

No real item runs here: the tests plant tiny items (a script that writes a
file) in place of the table, and an empty set of experiments where `all`
would otherwise run the grids."""
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from transformer import cli, reproduce
from transformer.reproduce import Item

ROOT = Path(__file__).resolve().parent.parent
# a commit of this checkout, which a planted record names as its code's
HEAD = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT,
                      capture_output=True, text=True).stdout.strip()


def planted(tmp_path, name, code=0, needs=(), outputs=None, last=False):
    """An item whose command is a script that counts its runs in
    tmp_path/NAME.count, writes its outputs under {results} and exits
    with `code`."""
    outputs = outputs or (f"planted/{name}.json",)
    script = tmp_path / f"{name}.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"count = pathlib.Path({str(tmp_path / (name + '.count'))!r})\n"
        "count.write_text(str(int(count.read_text() or 0) + 1)"
        " if count.exists() else '1')\n"
        f"if {code}:\n    sys.exit({code})\n"
        "for out in sys.argv[2:]:\n"
        "    p = pathlib.Path(sys.argv[1]) / out\n"
        "    p.parent.mkdir(parents=True, exist_ok=True)\n"
        "    p.write_text(json.dumps({'environment': "
        f"{{'git_commit': {HEAD!r}}}}}))\n")
    line = " ".join([shlex.quote(str(script)), "{results}",
                     *map(shlex.quote, outputs)])
    return Item(name, (line,), tuple(outputs), 0.5, "a test", needs, last)


def runs(tmp_path, name) -> int:
    count = tmp_path / f"{name}.count"
    return int(count.read_text()) if count.exists() else 0


@pytest.fixture
def plant(monkeypatch):
    """Replace the table (and, for `all`, the experiments) by planted
    ones."""
    def set_items(*items, experiments=None):
        monkeypatch.setattr(reproduce, "REPRODUCE",
                            {i.name: i for i in items})
        if experiments is not None:
            import transformer.ablations
            monkeypatch.setattr(transformer.ablations, "EXPERIMENTS",
                                experiments)
    return set_items


def one_error(capsys, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    for w in words:
        assert w in err[0], (w, err[0])


def test_plan_shows_missing_items_and_runs_nothing(tmp_path, capsys):
    """--plan against an empty results folder: every real item missing,
    nothing written, and the items' minutes in the compute left."""
    root = tmp_path / "experiments"
    assert cli.main(["experiment", "--plan", "--root", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    for item in reproduce.REPRODUCE.values():
        line = next(ln for ln in lines if ln.split()[0] == item.name)
        assert line.split()[1] == "missing", line
        assert f"({reproduce.item_outputs(item)[0]})" in line, line
    assert lines[-1].startswith("left: about "), lines[-1]
    assert cli.main(["experiment", "training-e10", "--plan", "--root",
                     str(root)]) == 0  # one item: its line and the total
    out = capsys.readouterr().out.splitlines()
    assert [ln.split()[:2] for ln in out[:-1]] == [["training-e10",
                                                    "missing"]]
    hours = reproduce.REPRODUCE["training-e10"].minutes / 60
    assert out[-1] == f"left: about {hours:.1f} core-hours"


def test_an_item_runs_once_then_is_skipped(tmp_path, capsys, plant):
    root = tmp_path / "experiments"
    item = planted(tmp_path, "planted-a")
    plant(item)
    assert cli.main(["experiment", "planted-a", "--root", str(root)]) == 0
    assert runs(tmp_path, "planted-a") == 1
    assert (tmp_path / "planted/planted-a.json").is_file()
    assert cli.main(["experiment", "planted-a", "--root", str(root)]) == 0
    assert runs(tmp_path, "planted-a") == 1  # its file exists: skipped
    assert "skipped" in capsys.readouterr().out
    assert cli.main(["experiment", "planted-a", "--plan", "--root",
                     str(root)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.split()[:2] == ["planted-a", "done"], line


def test_all_runs_items_after_grids_in_order_and_waits(tmp_path, capsys,
                                                        plant):
    """`all`: every missing item in the table's order; an item whose
    needs another shard writes waits, and the last item waits for all."""
    root = tmp_path / "experiments"
    a, b = planted(tmp_path, "planted-a"), planted(tmp_path, "planted-b")
    merge = planted(tmp_path, "planted-merge", needs=("planted-a",
                                                      "planted-b"))
    last = planted(tmp_path, "planted-last", last=True)
    plant(a, b, merge, last, experiments={})
    # shard 2/2 runs b (the 2nd) and last (the 4th): last waits for a
    assert cli.main(["experiment", "all", "--shard", "2/2", "--root",
                     str(root)]) == 0
    out = capsys.readouterr().out
    assert [runs(tmp_path, i.name) for i in (a, b, merge, last)] == [
        0, 1, 0, 0]
    assert "planted-last: waits for planted-a, planted-merge" in out, out
    assert cli.main(["experiment", "all", "--root", str(root)]) == 0
    assert [runs(tmp_path, i.name) for i in (a, b, merge, last)] == [
        1, 1, 1, 1]
    # a single item that waits is an error, not a skip
    (tmp_path / "planted/planted-a.json").unlink()
    (tmp_path / "planted/planted-merge.json").unlink()
    capsys.readouterr()
    assert cli.main(["experiment", "planted-merge", "--root",
                     str(root)]) == 2
    one_error(capsys, "planted-merge", "waits for planted-a")


def test_a_failing_command_is_one_line_and_exit_2(tmp_path, capsys,
                                                  plant):
    root = tmp_path / "experiments"
    bad = planted(tmp_path, "planted-fail", code=3)
    after = planted(tmp_path, "planted-after")
    plant(bad, after, experiments={})
    assert cli.main(["experiment", "all", "--root", str(root)]) == 2
    one_error(capsys, "planted-fail", "exited with code 3")
    assert runs(tmp_path, "planted-after") == 0  # the run stopped there
    # exit 0 without writing its files is an error too
    quiet = Item("planted-quiet", ("-c pass {results}",),
                 ("planted/never.json",), 0.1, "a test")
    plant(quiet)
    assert cli.main(["experiment", "planted-quiet", "--root",
                     str(root)]) == 2
    one_error(capsys, "planted-quiet", "did not write")


def test_bad_input_is_one_line(tmp_path, capsys):
    root = tmp_path / "experiments"
    for argv, words in ((["no-such-item"], ["unknown id 'no-such-item'"]),
                        (["training-e10", "--smoke"], ["unknown id"])):
        assert cli.main(["experiment", *argv, "--root", str(root)]) == 2
        one_error(capsys, *words)
    # a real item writes under the checkout's results/ only
    assert cli.main(["experiment", "training-floor", "--root",
                     str(root)]) == 2
    one_error(capsys, "training-floor", "run it without --root")
    assert not tmp_path.exists() or not any(tmp_path.rglob("*.json"))


def test_stale_is_a_file_made_with_other_code(tmp_path):
    item = Item("x", ("-c pass",), ("a.json",), 0.1, "a test")
    assert reproduce.item_state(item, tmp_path) == ("missing", "a.json")
    (tmp_path / "a.json").write_text(json.dumps({"wall_s": 1}))
    assert reproduce.item_state(item, tmp_path) == (
        "stale", "a.json records no code commit")
    last = Item("x", ("-c pass",), ("a.json",), 0.1, "a test", last=True)
    assert reproduce.item_state(last, tmp_path)[0] == "done"
    (tmp_path / "m.pt").write_bytes(b"weights")  # judged by its JSON
    (tmp_path / "b.json").write_text(json.dumps({"git_commit": HEAD}))
    pair = Item("y", ("-c pass",), ("b.json", "m.pt"), 0.1, "a test")
    assert reproduce.item_state(pair, tmp_path) == ("done", HEAD)
    for commit in ("0000000", "abcdef0+dirty"):
        (tmp_path / "a.json").write_text(json.dumps(
            {"environment": {"git_commit": commit}}))
        assert reproduce.item_state(item, tmp_path)[0] == "stale"
    from transformer.bench import git_commit
    now = git_commit()
    if now and "+" not in now:  # a clean checkout: the code now is done
        (tmp_path / "a.json").write_text(json.dumps(
            {"environment": {"git_commit": now[:7]}}))
        assert reproduce.item_state(item, tmp_path)[0] == "done"


def fake_checkout(root):
    """A git checkout with a tool, its sibling, package modules it imports
    (one by a relative import, one through a public name) and one it
    does not; returns a function that commits and gives the short hash."""
    files = {
        "tools/t.py": "import sib\nfrom transformer.a import x\n"
                      "def f():\n    from transformer import GPT\n",
        "tools/sib.py": "", "tools/other.py": "",
        "transformer/a.py": "from .b import y\nx = y\n",
        "transformer/b.py": "y = 1\n", "transformer/model.py": "",
        "transformer/c.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)

    def commit():
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C",
               str(root)]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "c"], check=True)
        return subprocess.run([*git, "rev-parse", "--short=7", "HEAD"],
                              capture_output=True, text=True,
                              check=True).stdout.strip()
    return commit


def test_code_files_follow_the_imports(tmp_path):
    fake_checkout(tmp_path)
    item = Item("x", ("tools/t.py --flag",), ("a.json",), 0.1, "a test")
    assert reproduce.code_files(item, tmp_path) == (
        "tools/sib.py", "tools/t.py", "transformer/a.py",
        "transformer/b.py", "transformer/model.py")
    inline = Item("y", ("-c 'from transformer.b import y'",), ("a.json",),
                  0.1, "a test")
    assert reproduce.code_files(inline, tmp_path) == ("transformer/b.py",)
    # the real table: every item with a tool runs its own script
    for it in reproduce.REPRODUCE.values():
        mine = reproduce.code_files(it)
        for line in it.commands:
            first = shlex.split(line)[0]
            assert first == "-c" or first in mine, (it.name, first)


def test_stale_is_a_change_to_code_the_item_runs(tmp_path):
    checkout, results = tmp_path / "co", tmp_path / "results"
    commit = fake_checkout(checkout)
    first = commit()
    item = Item("x", ("tools/t.py",), ("a.json",), 0.1, "a test")
    results.mkdir()

    def record(code, tools=None):
        env = {"git_commit": code} | ({"tools_commit": tools} if tools
                                      else {})
        (results / "a.json").write_text(json.dumps({"environment": env}))
        return reproduce.item_state(item, results, checkout)
    assert record(first) == ("done", first)
    (checkout / "transformer/c.py").write_text("z = 2\n")  # not imported
    (checkout / "tools/other.py").write_text("z = 2\n")
    assert record(first)[0] == "done"
    (checkout / "transformer/b.py").write_text("y = 2\n")  # uncommitted
    assert record(first) == ("stale", f"{first}: transformer/b.py has "
                                      "changed since")
    second = commit()
    assert record(first)[0] == "stale" and record(second)[0] == "done"
    (checkout / "tools/sib.py").write_text("w = 1\n")
    third = commit()
    assert record(second) == ("stale", f"{second}: tools/sib.py has "
                                       "changed since")
    # the package's commit for modules, the tools' commit for scripts
    assert record(second, tools=third) == ("done", second)
    assert record("0000000")[1] == "0000000: not a commit of this checkout"


def test_a_bridge_joins_older_code_to_the_code_now(tmp_path):
    """A record of older code is current when a bridge from its commit,
    to code the item's files still equal, says the two trained alike; a
    bridge that differs, or whose code has moved on, does not count."""
    checkout, results = tmp_path / "co", tmp_path / "results"
    commit = fake_checkout(checkout)
    first = commit()
    (checkout / "transformer/b.py").write_text("y = 2\n")
    second = commit()
    item = Item("x", ("tools/t.py",), ("a.json",), 0.1, "a test",
                bridges="bridges")
    (results / "bridges").mkdir(parents=True)
    (results / "a.json").write_text(json.dumps({"git_commit": first}))

    def state(identical, to=second):
        (results / "bridges" / "b.json").write_text(json.dumps(
            {"from": first, "to": to, "tools_to": to,
             "identical": identical}))
        return reproduce.item_state(item, results, checkout)
    assert state(True) == ("done", f"{first} bridged to {second}")
    assert state(False)[0] == "stale"
    assert state(True, to=first)[0] == "stale"  # b.py differs from `to`
    (checkout / "transformer/b.py").write_text("y = 3\n")
    commit()
    assert state(True)[0] == "stale"  # the code moved past the bridge


def test_a_listed_item_is_missing_until_every_listed_file_is_there(tmp_path):
    lister = tmp_path / "lister.py"
    lister.write_text("print('a.json')\nprint('b.json')\n")
    item = Item("x", ("-c pass",), (), 0.1, "a test",
                listing=shlex.quote(str(lister)))
    assert reproduce.item_outputs(item) == ("a.json", "b.json")
    (tmp_path / "a.json").write_text(json.dumps({"git_commit": HEAD}))
    assert reproduce.item_state(item, tmp_path) == ("missing", "b.json")
    (tmp_path / "b.json").write_text(json.dumps({"git_commit": HEAD}))
    assert reproduce.item_state(item, tmp_path)[0] == "done"
    lister.write_text("import sys\nsys.exit(1)\n")
    with pytest.raises(ValueError, match="x: `python .*` listed no files"):
        reproduce.item_outputs(item)


def test_the_table_covers_what_the_book_reads():
    """Every results/ JSON that REPORT.md or a chapter names (outside the
    experiment grids) is an item's output or a kept record; every kept
    record and every item's output exists; every command's script
    exists; names and needs are consistent; book-numbers is last."""
    declared = {o for i in reproduce.REPRODUCE.values() for o in i.outputs}
    assert not declared & set(reproduce.KEPT)
    named = set()
    for path in [ROOT / "REPORT.md", *sorted((ROOT / "chapters")
                                             .glob("*.md"))]:
        named |= set(re.findall(r"results/([\w./-]+\.json)",
                                path.read_text()))
    named = {n for n in named if not re.match(r"experiments/E", n)}
    assert named, "the scan found nothing"
    assert named <= declared | set(reproduce.KEPT), named - declared
    for out in [*declared, *reproduce.KEPT]:
        assert (ROOT / "results" / out).is_file(), out
    items = list(reproduce.REPRODUCE.values())
    for i, item in enumerate(items):
        for line in item.commands:
            first = shlex.split(line)[0]
            assert first == "-c" or (ROOT / first).is_file(), line
        before = {o.name for o in items[:i]}
        assert set(item.needs) <= before, item.name  # in the table's order
    assert items[-1].name == "book-numbers" and items[-1].last
    assert sum(i.last for i in items) == 1
