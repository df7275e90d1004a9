"""Tests for transformer.experiments (chapter "Ablations: one variable at a
time"): declarations, smoke runs, resume, records, summaries, probes."""
import dataclasses
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from transformer.baseline import token_stream
from transformer.ablations import EXPERIMENTS
from transformer.bridges import losses_digest
from transformer.experiments import (RECIPE, Experiment, Probe,
                                     run_experiment, run_probe,
                                     summary_rows,
                                     summary_table)
from transformer.grid_point import config_hash
from transformer.cli import main as cli
from transformer.model import GPT, GPTConfig, gpt_param_count
from transformer.training import TrainConfig, init_model, train
from transformer.stats import summarize

PROBES = {i: e for i, e in EXPERIMENTS.items() if isinstance(e, Probe)}

ROOT = Path(__file__).resolve().parents[1] / "results" / "experiments"
GRIDS = [e for e in EXPERIMENTS.values() if isinstance(e, Experiment)]


@pytest.fixture(scope="module")
def data():
    return token_stream(257)  # the experiments' byte-level stream


def _decl(**kw):
    base = dict(id="E99", title="t", variable="norm",
                values=("layernorm", "rmsnorm"), prediction="p",
                falsifier="f", seeds=(0, 1))
    base.update(kw)
    return Experiment(**base)


def test_declaration_validation():
    _decl()  # valid
    for kw, word in [({"values": ("layernorm",)}, "values"),
                     ({"seeds": (0,)}, "seeds"),
                     ({"prediction": " "}, "prediction"),
                     ({"falsifier": ""}, "prediction"),
                     ({"variable": "colour"}, "variable"),
                     ({"id": "four"}, "id"),
                     ({"extras": ("magic",)}, "extras"),
                     ({"model": {"n_embd": 64, "wings": 2}}, "model")]:
        with pytest.raises(ValueError, match=word):
            _decl(**kw)
    with pytest.raises(ValueError, match="warmup_steps"):
        _decl(model={"n_embd": 16, "n_head": 2, "n_layer": 1,
                     "block_size": 8},
              run={"steps": 10, "warmup_steps": 11}).configs(None,
                                                             "rmsnorm")
    with pytest.raises(ValueError, match="model: unknown fields"):
        _decl(run={"eval_every": 5})  # a field of the old recipe class
    for exp in GRIDS:  # every declared point is buildable
        for stratum, value, _ in exp.points():
            exp.configs(stratum, value)


def test_smoke_runs_and_resume(tmp_path, capsys):
    for exp_id in ("E4", "E6"):
        assert cli(["experiment", exp_id, "--smoke",
                    "--root", str(tmp_path)]) == 0
    assert not list(tmp_path.glob("E*"))  # smoke records live apart
    smoke = tmp_path / "smoke"
    files = sorted(smoke.glob("*/*.json"))
    n_points = sum(len(EXPERIMENTS[i].smoke().points()) for i in ("E4", "E6"))
    assert len(files) == n_points
    stamps = {p: p.stat().st_mtime_ns for p in files}
    cli(["experiment", "E4", "--smoke", "--root", str(tmp_path)])
    assert {p: p.stat().st_mtime_ns for p in files} == stamps
    out = capsys.readouterr().out
    assert "done, skipped" in out and "prediction:" in out
    for p in files:
        rec = json.loads(p.read_text())
        for key in ("git_commit", "model_config", "train_config", "seed",
                    "train_loss", "grad_norm", "val_steps", "val_loss",
                    "final", "wall_s", "machine"):
            assert key in rec, key
        assert rec["smoke"] is True and "run_config" not in rec
        assert rec["val_steps"][-1] == rec["train_config"]["steps"]
    e4 = [json.loads(p.read_text()) for p in smoke.glob("E4/*.json")]
    for rec in e4:
        learned = rec["value"] == "learned"
        assert (rec["final"]["val_loss_2x"] is None) == learned
    e6 = [json.loads(p.read_text()) for p in smoke.glob("E6/*.json")]
    for rec in e6:
        assert len(rec["init_grad_norms"]) == rec["stratum"]
    cli(["experiment", "--list", "--smoke", "--root", str(tmp_path)])
    assert f"({len(e4)}/{len(e4)} runs)" in capsys.readouterr().out


def test_a_record_is_reused_only_if_it_matches_the_declaration(tmp_path,
                                                                capsys):
    """The runner never reuses a record whose configuration or smoke flag
    differs from what it would run; it reruns that point."""
    from transformer.experiments import (count_records, record_matches,
                                         records_dir)
    exp = EXPERIMENTS["E5"].smoke()
    run_experiment(exp, tmp_path, log=lambda s: None)
    out = records_dir("E5", tmp_path, smoke=True)
    files = sorted(out.glob("*.json"))
    assert count_records(exp, tmp_path) == (len(files), len(files))
    rec = json.loads(files[0].read_text())
    assert record_matches(rec, exp, rec["stratum"], rec["value"])
    real = EXPERIMENTS["E5"]
    assert not record_matches(rec, real, rec["stratum"], rec["value"])
    # a record from another configuration, and one from a smoke run,
    # placed where the runner looks: both are rerun, not reused
    changed = dict(rec, train_config={**rec["train_config"], "lr": 0.5})
    files[0].write_text(json.dumps(changed))
    unflagged = json.loads(files[1].read_text())
    unflagged["smoke"] = False
    files[1].write_text(json.dumps(unflagged))
    assert count_records(exp, tmp_path) == (len(files) - 2, len(files))
    log = []
    run_experiment(exp, tmp_path, log=log.append)
    assert sum("differs from the declaration" in m for m in log) == 2
    assert sum("done, skipped" in m for m in log) == len(files) - 2
    assert count_records(exp, tmp_path) == (len(files), len(files))
    # a record written before a field existed matches if the field holds
    # its default (the committed records predate attn_scale and fused)
    older = json.loads(files[2].read_text())
    del older["model_config"]["fused"]
    assert record_matches(older, exp, older["stratum"], older["value"])
    for exp_id, real in EXPERIMENTS.items():  # the committed records
        have, n = count_records(real, ROOT)
        assert 0 <= have <= n == len(real.points()), exp_id


def test_records_of_the_old_form_are_read_under_todays_names(tmp_path):
    """A record written before the training configuration had one name
    stores it as "run_config": read_record gives it under "train_config"
    (LEGACY_RECORD_KEYS, the one mapping), so the runner and --plan count
    it done and never rewrite it, and an old-form record of another
    configuration is still stale."""
    from transformer.experiments import (LEGACY_RECORD_KEYS, count_records,
                                         read_record, records_dir)
    assert LEGACY_RECORD_KEYS == {"run_config": "train_config"}
    exp = EXPERIMENTS["E5"].smoke()
    run_experiment(exp, tmp_path, log=lambda s: None)
    files = sorted(records_dir("E5", tmp_path, smoke=True).glob("*.json"))
    new = [json.loads(p.read_text()) for p in files]
    for p, rec in zip(files, new):  # each rewritten in the old form
        p.write_text(json.dumps({("run_config" if k == "train_config"
                                  else k): v for k, v in rec.items()}))
    old = [p.read_text() for p in files]
    assert all('"run_config"' in t and '"train_config"' not in t
               for t in old)
    assert [read_record(p) for p in files] == new  # keys in their order
    assert count_records(exp, tmp_path) == (len(files), len(files))
    log = []
    run_experiment(exp, tmp_path, log=log.append)
    assert sum("done, skipped" in m for m in log) == len(files)
    assert [p.read_text() for p in files] == old  # never rewritten
    changed = json.loads(old[0])
    changed["run_config"]["lr"] = 0.5
    files[0].write_text(json.dumps(changed))
    assert count_records(exp, tmp_path) == (len(files) - 1, len(files))


def test_token_budget_fixed():
    """Every arm of a comparison sees the same number of tokens: one budget
    per experiment, or per stratum where the stratum is the budget (E30)."""
    for exp in GRIDS:
        budgets = {}
        for stratum, value, _ in exp.points():
            mc, rc = exp.configs(stratum, value)
            names = (exp.stratum if isinstance(exp.stratum, tuple)
                     else (exp.stratum,))
            key = stratum if "steps" in names else None
            budgets.setdefault(key, set()).add(
                rc.steps * rc.batch_size * mc.block_size)
        assert all(len(b) == 1 for b in budgets.values()), exp.id
    e30 = EXPERIMENTS["E30"]
    assert sorted(e30.configs(s, "rope")[1].steps for s in e30.strata) == [
        400, 800, 1600]
    mc, rc = EXPERIMENTS["E4"].configs(None, "rope")
    assert rc.steps * rc.batch_size * mc.block_size == 400 * 32 * 64


def test_runs_use_the_one_training_loop_and_evaluator(data):
    """A grid point is trained by training.train with the recipe, and is
    a function of its seed; E4's head and tail come from the same
    per-target losses as the mean."""
    from transformer.grid_point import run_point
    from transformer.training import evaluate, heldout_losses
    torch.set_num_threads(1)
    exp = EXPERIMENTS["E4"].smoke()
    mc, cfg = exp.configs(None, "rope", seed=3)
    assert cfg.seed == 3 and all(getattr(cfg, k) == v
                                 for k, v in RECIPE.items()
                                 if k not in exp.run)  # smoke sets some
    runs = [run_point(exp, None, "rope", 3, data) for _ in range(2)]
    assert runs[0]["train_loss"] == runs[1]["train_loss"]  # bit-identical
    assert runs[0]["final"] == runs[1]["final"]
    other = run_point(exp, None, "rope", 4, data)
    assert other["train_loss"] != runs[0]["train_loss"]
    rec = runs[0]
    assert rec["val_steps"] == [0, 2, 3] and not rec["diverged"]
    assert rec["train_config"] == dataclasses.asdict(cfg)
    f = rec["final"]
    assert math.isclose(f["val_loss_2x"], (f["val_loss_2x_head"]
                                           + f["val_loss_2x_tail"]) / 2,
                        rel_tol=0, abs_tol=1e-9)
    torch.manual_seed(0)
    model = GPT(mc)
    _, _, val_ids = data
    nll = heldout_losses(model, val_ids, 32, 3, 2, seed=7)  # (6, 32)
    assert nll.shape == (6, 32) and nll.dtype == torch.float64
    assert nll.mean().item() == evaluate(model, val_ids, 32, 3, 2, seed=7)


def test_a_non_finite_run_stops_and_is_marked_diverged(data):
    from transformer.grid_point import run_point
    torch.set_num_threads(1)
    exp = replace(EXPERIMENTS["E5"].smoke(), run={"lr": 1e30, "min_lr": 0,
                                                  "grad_clip": 0})
    rec = run_point(exp, None, "layernorm", 0, data)
    assert rec["diverged"] and math.isnan(rec["final"]["val_loss"])
    assert not math.isfinite(rec["train_loss"][-1]) or not math.isfinite(
        rec["grad_norm"][-1])  # it stopped at the first non-finite step


def test_summary_rows():
    exp = _decl(seeds=(0, 1, 2))
    recs = []
    losses = {"layernorm": [5.0, 5.1, math.nan], "rmsnorm": [4.9, 5.0, 4.8]}
    for value, xs in losses.items():
        for seed, x in enumerate(xs):
            recs.append({"value": value, "stratum": None, "seed": seed,
                         "final": {"val_loss": x,
                                   "diverged": math.isnan(x)}})
    rows = summary_rows(exp, recs, ("val_loss",))
    assert [r["diverged"] for r in rows] == [1, 0]
    assert rows[0]["val_loss"] == summarize([5.0, 5.1])
    assert rows[1]["val_loss"] == summarize([4.9, 5.0, 4.8])
    table = summary_table(exp, recs, ("val_loss",))
    s = summarize([4.9, 5.0, 4.8])
    assert f"| rmsnorm | 3 | 0 | {s.mean:.3f} [{s.lo:.3f}, {s.hi:.3f}] |" \
        in table
    recs[0]["final"]["val_loss"] = None  # not applicable
    recs[1]["final"]["val_loss"] = None
    assert summary_rows(exp, recs, ("val_loss",))[0]["val_loss"] is None


def _committed(exp_id):
    """The committed records of `exp_id` as the runner reads them
    (read_record: keys under today's names, LEGACY_RECORD_KEYS)."""
    from transformer.experiments import read_record
    return [read_record(p) for p in sorted((ROOT / exp_id).glob("*.json"))]


def _bridges(exp_id):
    from transformer.bridges import read_bridges
    return read_bridges(exp_id, ROOT)


def _one_clean_revision(exp_id, recs, bridges=()):
    """All records of a table from one clean commit, or from clean commits
    joined by bridges that hold (bridges.joined_revisions)."""
    from transformer.bridges import joined_revisions
    commits = {r["git_commit"] for r in recs}
    for commit in commits:
        assert re.fullmatch(r"[0-9a-f]{40}", commit), commit  # not +dirty
    assert joined_revisions(EXPERIMENTS[exp_id], recs, list(bridges)), \
        f"{exp_id} mixes revisions: {commits}"


def _run_name_of(exp_id, rec):
    from transformer.experiments import _run_name
    return _run_name(EXPERIMENTS[exp_id], _hashable(rec["stratum"]),
                     rec["value"], rec["seed"])


# TrainConfig fields that existed when some records were made and are gone
# now, with the one value today's code always has: `compile` was a field
# (False in every recorded run) before it became an argument of `train`.
# Such a record keeps its configuration and hash as written; the check
# drops the retired field, after checking its value.
RETIRED_RUN_FIELDS = {"compile": False}

# Grids whose records land one by one across sessions (resumable): every
# record there must already be right, the set need not be complete yet.
# An id leaves this set when its grid is whole; chapter 15 and REPORT.md
# say how many of its points have run.
IN_PROGRESS: set = set()
# Declared and not started: no record may exist yet (the first one moves
# the id to IN_PROGRESS); chapter 15 shows their tables as "not run".
NOT_STARTED = set()


def _hashable(stratum):
    """A record's stratum: a crossed one (E19) reads back as a list."""
    return tuple(stratum) if isinstance(stratum, list) else stratum


@pytest.mark.parametrize("exp", GRIDS, ids=lambda e: e.id)
def test_committed_records_complete_and_from_one_revision(exp):
    """Every grid point of every declared experiment has its record; the
    record's configuration is exactly what the declaration gives now
    (`fused` included; a retired field only with the value the code now
    always has), its hash matches, it carries the unigram and bigram
    references of its tokenization, and all records of one experiment
    (one table) come from one clean commit."""
    recs = _committed(exp.id)
    have = {(_hashable(r["stratum"]), r["value"], r["seed"]) for r in recs}
    if exp.id in NOT_STARTED:
        assert not recs, f"{exp.id} has records: move it to IN_PROGRESS"
        return
    if exp.id in IN_PROGRESS:  # a long grid lands record by record
        assert have <= set(exp.points()) and have, exp.id
    else:
        assert have == set(exp.points())
    _one_clean_revision(exp.id, recs, _bridges(exp.id))
    for r in recs:
        mc, rc = exp.configs(r["stratum"], r["value"], r["seed"])
        # fields added to GPTConfig after a record was written read as
        # their defaults (GPTConfig fills them), so old records stay valid
        assert json.loads(json.dumps(dataclasses.asdict(GPTConfig(
            **r["model_config"])))) == json.loads(json.dumps(
                dataclasses.asdict(mc)))
        run = dict(r["train_config"])
        retired = {k: run.pop(k) for k in RETIRED_RUN_FIELDS if k in run}
        assert retired == {k: RETIRED_RUN_FIELDS[k] for k in retired}
        assert run == json.loads(json.dumps(dataclasses.asdict(rc)))
        # the hash of what the record stores; with no retired field that
        # is config_hash(mc, rc), since both configurations equal it
        assert r["config_hash"] == config_hash(r["model_config"],
                                               r["train_config"])
        assert r["reference"]["bigram"] < r["reference"]["unigram"]
        assert r["tokens"] == rc.steps * rc.batch_size * mc.block_size


@pytest.mark.parametrize("pid", ["E16", "E17", "E18", "E39"])
def test_committed_chapter_probes(pid):
    """The chapters' own measurements (score-scale sweep, calibration,
    the trained bigram's learning rate) have a record per declared seed,
    from one clean revision, with every metric of their table finite;
    chapters 04, 14 and 07 check the raw numbers against a live run."""
    recs = _committed(pid)
    assert sorted(r["seed"] for r in recs) == list(PROBES[pid].seeds)
    _one_clean_revision(pid, recs)
    for r in recs:
        assert r["smoke"] is False and r["experiment"] == pid
        for metric in EXPERIMENTS[pid].metrics:
            assert math.isfinite(r["final"][metric]), metric


def test_committed_e39_metrics_come_from_its_arms():
    """E39's final metrics are its arms' band accuracies as recorded, the
    bands partition each arm's queries (the same held-out queries for every
    arm), and its differences and minimum are computed from them."""
    from transformer.ablations import E39_ARMS, E39_WINDOWS
    for r in _committed("E39"):
        f = r["final"]
        counts = set()
        for arm in E39_ARMS:
            reach = r[arm]["reach"]
            for w in E39_WINDOWS:
                counts.add(sum(reach[f"n_{b}_{w}"]
                               for b in ("hop", "stack", "beyond")))
                for b in ("hop", "stack", "beyond"):
                    assert f[f"{arm}_{b}_{w}"] == reach[f"{b}_{w}"]
        assert len(counts) == 1  # every arm scored on the same queries
        for w in E39_WINDOWS:
            assert f[f"w{w}_hop_minus_stack"] == (f[f"w{w}_hop_{w}"]
                                                  - f[f"w{w}_stack_{w}"])
        assert f["full_min"] == min(f[f"full_{b}_{w}"] for w in E39_WINDOWS
                                    for b in ("hop", "stack", "beyond"))


def test_a_planted_mixed_revision_is_caught(tmp_path):
    """The one-revision check above fails on a table that mixes two, and
    on one whose bridge does not hold; a true bridge joins them."""
    recs = _committed("E8")
    _one_clean_revision("E8", recs)
    with pytest.raises(AssertionError, match=r"\+dirty"):
        _one_clean_revision("E8", [{**recs[0], "git_commit": recs[0][
            "git_commit"] + "+dirty"}, *recs[1:]])
    old, new = recs[0]["git_commit"], "0" * 40
    mixed = [*recs[:-1], {**recs[-1], "git_commit": new}]
    with pytest.raises(AssertionError, match="mixes revisions"):
        _one_clean_revision("E8", mixed)
    bridge = {"from": old, "to": new, "record": _run_name_of("E8", recs[0]),
              "digest": losses_digest(recs[0]), "identical": True}
    _one_clean_revision("E8", mixed, [bridge])  # joined
    for bad in ({"identical": False}, {"digest": "0" * 64},
                {"from": new}, {"record": _run_name_of("E8", recs[1])},
                {"to": new[:7]}):
        with pytest.raises(AssertionError, match="mixes revisions"):
            _one_clean_revision("E8", mixed, [{**bridge, **bad}])


def test_a_bridge_reruns_a_record_and_says_whether_it_held(tmp_path,
                                                           monkeypatch):
    """bridge_record reruns a record with this code: bit-identical curves
    give a bridge that holds (and that the revision check accepts); a
    record whose curve differs by one value gives one that does not; the
    code must be clean and the name a record of the grid."""
    import transformer.bridges as br
    import transformer.experiments as ex
    import transformer.grid_point as gp
    torch.set_num_threads(1)
    exp = EXPERIMENTS["E4"].smoke()
    monkeypatch.setattr(gp, "CODE_COMMIT", "a" * 40)
    recs = ex.run_experiment(exp, tmp_path, log=lambda *a: None,
                             data=token_stream(exp.vocab_size))
    name = ex._run_name(exp, *exp.points()[0])
    monkeypatch.setattr(gp, "CODE_COMMIT", "b" * 40)
    good = br.bridge_record(exp, name, tmp_path, log=lambda *a: None)
    assert good["identical"] and good["from"] == "a" * 40
    path = tmp_path / "smoke" / exp.id / name
    assert good["digest"] == losses_digest(json.loads(path.read_text()))
    assert len(recs) == len(exp.points())
    assert (tmp_path / "smoke" / exp.id / "bridges"
            / "aaaaaaa-bbbbbbb.json").exists()
    tampered = json.loads(path.read_text())
    tampered["train_loss"][-1] += 1e-6
    path.write_text(json.dumps(tampered))
    assert not br.bridge_record(exp, name, tmp_path,
                                log=lambda *a: None)["identical"]
    with pytest.raises(ValueError, match="name: expected a record file"):
        br.bridge_record(exp, "nothing.json", tmp_path)
    monkeypatch.setattr(gp, "CODE_COMMIT", "a" * 7 + "+dirty")
    with pytest.raises(ValueError, match="clean committed code"):
        br.bridge_record(exp, name, tmp_path)


class _Stop(Exception):
    pass


@pytest.mark.parametrize("exp", GRIDS, ids=lambda e: e.id)
def test_a_record_reproduces_its_first_logged_losses(exp):
    """The committed record of each experiment's first grid point, seed
    0, is rebuilt from its own configuration and trained for three steps
    with the one training loop: its first three training losses must come
    back (bit-identical on the machine that wrote them; 1e-4 across
    machines, whose kernels round differently)."""
    stratum, value, seed = exp.points()[0]
    if exp.id in NOT_STARTED:  # checked to have no records at all above
        assert not _committed(exp.id)
        return
    (rec,) = [r for r in _committed(exp.id)
              if _hashable(r["stratum"]) == stratum
              and r["value"] == value and r["seed"] == seed]
    mc = GPTConfig(**rec["model_config"])
    run = {k: v for k, v in rec["train_config"].items()
           if k not in RETIRED_RUN_FIELDS}  # checked above
    cfg = TrainConfig(**run)
    tok, train_ids, val_ids = token_stream(mc.vocab_size)
    model = init_model(mc, seed)
    seen = {}

    def stop(step, hist):
        if step == 3:
            seen["loss"] = list(hist["train_loss"])
            raise _Stop

    with pytest.raises(_Stop):
        train(model, train_ids, val_ids, cfg, callback=stop)
    got, want = seen["loss"], rec["train_loss"][:3]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4, (got, want)


def test_probes_smoke_resume_and_records(tmp_path, capsys):
    """E10-E13 run through the same runner: one JSON per seed, skipped on
    a second run, with the metrics their tables show."""
    for pid in PROBES:
        assert cli(["experiment", pid, "--smoke",
                    "--root", str(tmp_path)]) == 0
    files = sorted((tmp_path / "smoke").glob("*/*.json"))
    assert len(files) == 2 * len(PROBES)
    stamps = {p: p.stat().st_mtime_ns for p in files}
    cli(["experiment", "E12", "--smoke", "--root", str(tmp_path)])
    assert {p: p.stat().st_mtime_ns for p in files} == stamps
    for p in files:
        rec = json.loads(p.read_text())
        assert rec["smoke"] and rec["experiment"] in PROBES
        for metric in EXPERIMENTS[rec["experiment"]].metrics:
            assert math.isfinite(rec["final"][metric]), metric
    e12 = [json.loads(p.read_text())
           for p in (tmp_path / "smoke").glob("E12/*.json")]
    assert all(r["final"]["max_relative_error"] == 0.0 for r in e12)
    assert all(r["final"]["as_derived"] == 1.0 for r in e12)
    assert isinstance(PROBES["E10"], Probe)


def test_heldout_losses_per_token_average_to_evaluate():
    """The per-token losses E13 takes its standard error from average to
    the full-stream evaluation, and leave the mode."""
    from transformer.training import evaluate, heldout_losses
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=1,
                          n_head=2, n_embd=16))
    ids = torch.randint(0, 40, (200,))
    nll = heldout_losses(model, ids, 16, 4, None).view(-1)
    assert nll.shape == ((200 - 1) // 16 * 16,) and nll.dtype == torch.float64
    assert model.training
    assert nll.mean().item() == evaluate(model, ids, 16, 4, None)


def _interval(lo, hi):
    from transformer.stats import Summary
    return Summary(n=3, mean=(lo + hi) / 2, sd=float("nan"),
                   se=float("nan"), lo=lo, hi=hi, level=0.95, method="t")


@pytest.mark.parametrize("lo,hi,claim,margin,want", [
    (-0.3, -0.2, "below", 0.1, "held"),
    (-0.3, -0.05, "below", 0.1, "inconclusive"),
    (-0.09, 0.2, "below", 0.1, "failed"),
    (0.2, 0.3, "above", 0.1, "held"),
    (0.05, 0.3, "above", 0.1, "inconclusive"),
    (-0.317, 0.506, "above", 0.05, "inconclusive"),  # E7's old "held"
    (-0.01, 0.01, "within", 0.02, "held"),
    (-0.01, 0.03, "within", 0.02, "inconclusive"),
    (0.03, 0.05, "within", 0.02, "failed"),
    (-0.05, -0.03, "within", 0.02, "failed"),
    (-0.01, 0.4, "not_below", 0.02, "held"),
    (-0.1, -0.05, "not_below", 0.02, "failed"),
    (-0.1, 0.05, "not_above", 0.02, "inconclusive"),
])
def test_judge_decides_on_the_whole_interval(lo, hi, claim, margin, want):
    from transformer.experiments import judge
    assert judge(_interval(lo, hi), claim, margin) == want


def test_judge_complements_and_bad_input():
    from transformer.experiments import all_of, judge
    flip = {"held": "failed", "failed": "held",
            "inconclusive": "inconclusive"}
    for lo in (-0.3, -0.12, -0.1, -0.05, 0.0, 0.2):
        for width in (0.01, 0.1, 0.5):
            d = _interval(lo, lo + width)
            assert judge(d, "below", 0.1) == flip[judge(d, "not_below",
                                                        0.1)] or \
                d.hi == -0.1  # the boundary belongs to not_below
    assert all_of("held", "held") == "held"
    assert all_of("held", "inconclusive") == "inconclusive"
    assert all_of("inconclusive", "failed") == "failed"
    with pytest.raises(ValueError, match="claim"):
        judge(_interval(0, 1), "less")
    with pytest.raises(ValueError, match="margin"):
        judge(_interval(0, 1), "below", -0.1)


FAILURE_TESTS = ROOT / "failure_tests"


def test_committed_e13_catches_both_bugs():
    """The committed E13 records pass for the correct model, and the
    committed failure tests (tools/failure_tests.py e13) show each
    deliberate bug caught, on the side declared, for every seed of E13's
    current declaration and recipe."""
    from transformer.training_checks import LEAK_MODEL, e13_verdict
    probe = PROBES["E13"]
    recs = [json.loads(p.read_text())
            for p in sorted((ROOT / "E13").glob("*.json"))]
    assert sorted(r["seed"] for r in recs) == list(probe.seeds)
    assert all(e13_verdict(r["final"]["excess"]) == "pass" for r in recs)
    ft = json.loads((FAILURE_TESTS / "E13_mutants.json").read_text())
    assert ft["model"] == LEAK_MODEL and ft["seeds"] == list(probe.seeds)
    assert set(ft["mutants"]) == {"mask_after_softmax",
                                  "targets_not_shifted"}
    for name, expect in (("mask_after_softmax", "leak"),
                         ("targets_not_shifted", "misfit")):
        m = ft["mutants"][name]
        assert m["expect"] == expect and m["caught"] is True
        assert sorted(m["runs"], key=int) == [str(s) for s in probe.seeds]
        for run in m["runs"].values():
            assert e13_verdict(run["excess"]) == expect == run["verdict"]
    # the loader bug fools the estimate drawn through the same loader
    assert all(r["excess_loader"] < -0.5 for r in
               ft["mutants"]["targets_not_shifted"]["runs"].values())


def test_e12_counts_what_decoding_holds_and_can_fail():
    """E12 counts the tensors the caches of a real decode_stream
    generation hold: exactly kv_cache_bytes at block_size, every
    position fed filled. A cache that allocates twice the positions the
    loop asks for is caught (relative error 1.0 > 5%)."""
    import transformer.kv_cache as kv
    from transformer.probes import measure_cache_memory
    out = measure_cache_memory(0, smoke=True)
    assert out["max_relative_error"] == 0.0 and out["as_derived"] == 1.0
    real = kv.make_caches

    def oversized(model, B, max_len):
        return real(model, B, 2 * max_len)
    kv.make_caches = oversized
    try:
        bad = measure_cache_memory(0, smoke=True)
    finally:
        kv.make_caches = real
    assert bad["max_relative_error"] == 1.0 > 0.05


def test_committed_e12_against_hugging_face():
    """tools/failure_tests.py e12-hf: Hugging Face GPT-2's cache, after
    greedy generation at E12's shapes, holds exactly kv_cache_bytes at
    the positions it filled (it grows by concatenation)."""
    from transformer.probes import E12_SHAPES
    hf = json.loads((FAILURE_TESTS / "E12_hf.json").read_text())
    assert [(r["B"], r["prompt"]) for r in hf["shapes"]] == [
        (B, T0) for B, T0, _ in E12_SHAPES]
    assert hf["max_relative_error"] == 0.0 and hf["as_derived"] is True
    for r in hf["shapes"]:
        assert r["held_bytes"] == r["derived_filled"]
        assert r["filled"] == r["prompt"] + r["new"] - 1


def test_show_prints_each_points_resolved_configuration(tmp_path, capsys):
    """`experiment ID --show` prints every grid point's configuration as
    Experiment.configs resolves it (E6's post-norm arm with its own
    learning rate and warm-up), and runs and writes nothing."""
    assert cli(["experiment", "E6", "--show", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    exp = EXPERIMENTS["E6"]
    blocks = out.split("\n" + "n_layer=")[1:]
    assert len(blocks) == len(exp.strata) * len(exp.values)
    for block, (stratum, value) in zip(blocks, [
            (s, v) for s in exp.strata for v in exp.values]):
        assert block.startswith(f"{stratum} norm_position={value} ")
        model_config, train_config = exp.configs(stratum, value)
        for config in (model_config, train_config):
            for name in ("n_layer", "norm_position", "lr", "warmup_steps",
                         "steps", "n_embd"):
                if hasattr(config, name):
                    assert f"{name}={getattr(config, name)!r}" in block
    assert "norm_position='post'" in out and "warmup_steps=200" in out
    assert list(tmp_path.iterdir()) == []
    assert cli(["experiment", "E13", "--show"]) == 0
    assert "transformer.probes.measure_unpredictable_targets" in capsys.readouterr().out


def test_a_crossed_stratum_sets_every_field_and_names_its_records():
    """E19's stratum is a tuple of fields: each point sets all of them,
    the record's name carries all of them, and a record read back from
    JSON (its stratum a list) is summarised with its declared point."""
    from transformer.ablations import EXPERIMENTS
    from transformer.experiments import _run_name, summary_rows
    e = EXPERIMENTS["E19"]
    assert len(e.strata) == 4 * 4 * 3 and e.seeds == (100,) and e.screen
    cell = (8, 1e-3, 1e-4, 80)
    mc, tc = e.configs(cell, "post-sqrtd", 100)
    assert (mc.n_layer, tc.lr, tc.min_lr, tc.warmup_steps) == cell
    assert (mc.norm_position, mc.embed_scale) == ("post", "sqrt_d")
    assert e.configs(cell, "deepnorm")[0].norm_position == "deepnorm"
    name = _run_name(e, cell, "pre", 100)
    assert name == ("n_layer=8_lr=0.001_min_lr=0.0001_warmup_steps=80_"
                    "norm_position=pre_seed=100.json")
    rec = {"value": "pre", "stratum": list(cell),
           "final": {"diverged": False, "val_loss": 2.0}}
    rows = [r for r in summary_rows(e, [rec], ("val_loss",))
            if r["n"]]
    assert len(rows) == 1 and rows[0]["single"]["val_loss"] == 2.0
    with pytest.raises(ValueError, match="strata"):
        dataclasses.replace(e, strata=((8, 1e-3),))


def test_cells_restrict_the_grid_and_are_checked(tmp_path):
    """`cells` keeps only the listed (stratum, value) pairs: points, the
    summary's rows and the smoke version all follow it; a cell outside
    strata x values is refused, naming the field."""
    e = _decl(stratum="n_layer", strata=(1, 2),
              cells=((1, "rmsnorm"), (2, "layernorm")))
    assert e.pairs() == [(1, "rmsnorm"), (2, "layernorm")]
    assert [p[:2] for p in e.points()] == [(1, "rmsnorm")] * 2 + \
        [(2, "layernorm")] * 2
    assert [(r["stratum"], r["value"]) for r in summary_rows(
        e, [], ("val_loss",))] == e.pairs()
    assert e.smoke().pairs() == e.pairs()
    assert len(_decl(stratum="n_layer", strata=(1, 2)).points()) == 8
    for bad in (((3, "rmsnorm"),), ((1, "batchnorm"),)):
        with pytest.raises(ValueError, match="cells"):
            _decl(stratum="n_layer", strata=(1, 2), cells=bad)


def test_step10_gradients_are_recorded_without_changing_training(data):
    """The "grads_step10" extra records one norm per block after step 10,
    and the loss curve is bit-identical to the same run without it (the
    measurement clears the gradients it makes and draws no random
    numbers)."""
    from transformer.grid_point import run_point
    kw = dict(model={"n_embd": 16, "n_head": 2, "n_layer": 2,
                     "block_size": 8},
              run={"steps": 12, "batch_size": 2, "warmup_steps": 2,
                   "eval_interval": 6, "eval_batches": 1})
    plain, with_g = (_decl(extras=x, **kw) for x in ((), ("grads_step10",)))
    a = run_point(plain, None, "layernorm", 0, data)
    b = run_point(with_g, None, "layernorm", 0, data)
    assert len(b["grad_norms_step10"]) == 2
    assert all(math.isfinite(g) and g > 0 for g in b["grad_norms_step10"])
    assert "grad_norms_step10" not in a
    assert losses_digest(a) == losses_digest(b)


def _best_screened_cells(recs) -> dict:
    """{(depth, arm): the record of its lowest finite held-out loss} over
    E6 rebuilt's screening records (E19, E20)."""
    best = {}
    for r in recs:
        key = (r["stratum"][0], r["value"])
        if not r["final"]["diverged"] and (
                key not in best
                or r["final"]["val_loss"] < best[key]["final"]["val_loss"]):
            best[key] = r
    return best


def test_e20_extends_exactly_the_edge_cells():
    """Amendment 1 of E6 rebuilt: E20 runs the column lr 3e-2 for exactly
    the (depth, arm) pairs whose best finite stage-1 (E19) cell is at the
    grid's highest learning rate, with E19's warm-ups, seed and budget."""
    from transformer.placement import E6B_EDGE, E6B_LRS
    from transformer.experiments import load_runs
    e19, e20 = EXPERIMENTS["E19"], EXPERIMENTS["E20"]
    recs = load_runs("E19", ROOT)
    assert len(recs) == len(e19.points())
    best = _best_screened_cells(recs)
    edge = {k for k, r in best.items() if r["stratum"][1] == max(E6B_LRS)}
    assert set(E6B_EDGE) == edge
    assert {(s[0], v) for s, v in e20.pairs()} == edge
    assert {s[3] for s, _ in e20.pairs()} == {s[3] for s in e19.strata}
    assert {s[1:3] for s, _ in e20.pairs()} == {(3e-2, 3e-3)}
    assert len(e20.points()) == 3 * len(edge) and e20.seeds == e19.seeds
    assert e20.run == e19.run and e20.overrides == e19.overrides


def test_split_evaluation_scores_model_and_references_on_one_text(data):
    """eval_text="split": the final loss is the mean over every target of
    the validation split in whole windows, and the record's unigram,
    bigram and n-gram references are scored on exactly those targets
    (n_targets), each distance to them stored; an unknown eval_text is
    refused, and a record made under the other text is stale."""
    from transformer.experiments import record_matches
    from transformer.grid_point import run_point
    from transformer.ngram import ngram_references, reference_losses
    from transformer.training import heldout_losses, split_windows
    e = _decl(eval_text="split", seeds=(0, 1),
              model={"n_embd": 16, "n_head": 2, "n_layer": 1,
                     "block_size": 32},
              run={"steps": 4, "batch_size": 4, "warmup_steps": 1,
                   "eval_interval": 2, "eval_batches": 1})
    rec = run_point(e, None, "rmsnorm", 0, data)
    _, train_ids, val_ids = data
    x, y = split_windows(val_ids, 32)
    ref = rec["reference"]
    assert ref["n_targets"] == y.numel() > 500_000
    assert y.numel() == (len(val_ids) - 1) // 32 * 32
    want = reference_losses(ngram_references(train_ids, 257), x, y)
    for k in ("unigram", "bigram", "ngram"):
        assert ref[k] == pytest.approx(want[k], abs=1e-12)
    assert ref["ngram"] < ref["bigram"] - 0.5 < ref["unigram"] - 1.0
    model = init_model(GPTConfig(**rec["model_config"]), 0)
    train(model, train_ids, val_ids, TrainConfig(**rec["train_config"]))
    got = heldout_losses(model, val_ids, 32, 256, None).mean().item()
    assert rec["final"]["val_loss"] == pytest.approx(got, abs=1e-9)
    assert rec["final"]["below_ngram"] == pytest.approx(
        ref["ngram"] - got, abs=1e-9)
    assert rec["eval_text"] == "split"
    assert record_matches(rec, e, None, "rmsnorm", 0)
    assert not record_matches(rec, replace(e, eval_text="batches"), None,
                              "rmsnorm", 0)
    with pytest.raises(ValueError, match="eval_text"):
        _decl(eval_text="everything")


DECIDED = {"E22": "E1", "E23": "E2", "E24": "E3", "E25": "E5", "E26": "E7",
           "E27": "E8"}


def test_decided_reruns_follow_the_declared_power_rule():
    """E22-E27 rerun E1-E8's grids unchanged but for the evaluation text
    (the whole split), the n-gram column and the seeds, which are the power
    rule's n for the pilot spread recomputed from the original records:
    the smallest n >= 5 whose 95% paired half-width is at most delta."""
    import itertools
    from transformer.ablations import (DECIDED_MAX, DECIDED_MIN, DELTA,
                                       PILOT_SD, seeds_needed)
    from transformer.experiments import load_runs
    from transformer.stats import t_quantile
    for new, old in DECIDED.items():
        e, base = EXPERIMENTS[new], EXPERIMENTS[old]
        by = {(json.dumps(r["stratum"]), json.dumps(r["value"]), r["seed"]):
              r["final"]["val_loss"] for r in load_runs(old, ROOT)}
        ss = df = 0.0
        for st in base.strata:
            for a, b in itertools.combinations(base.values, 2):
                d = [by[json.dumps(st), json.dumps(a), k]
                     - by[json.dumps(st), json.dumps(b), k]
                     for k in base.seeds]
                m = sum(d) / len(d)
                ss += sum((x - m) ** 2 for x in d)
                df += len(d) - 1
        assert PILOT_SD[old] == pytest.approx(math.sqrt(ss / df), abs=5e-5)
        n = seeds_needed(PILOT_SD[old], DELTA[new])
        assert e.seeds == tuple(range(n))
        half = [t_quantile(0.975, k - 1) * PILOT_SD[old] / math.sqrt(k)
                for k in (n - 1, n)]
        assert half[1] <= DELTA[new] or n == DECIDED_MAX
        assert half[0] > DELTA[new] or n == DECIDED_MIN
        assert e.eval_text == "split" and "below_ngram" in e.metrics
        for f in ("variable", "values", "model", "run", "stratum", "strata",
                  "overrides", "extras"):
            assert getattr(e, f) == getattr(base, f), (new, f)
    e31 = EXPERIMENTS["E31"]  # E2's grid with the key/value heads varied
    assert e31.seeds == tuple(range(seeds_needed(PILOT_SD["E2"],
                                                 DELTA["E31"])))
    assert (e31.variable, e31.values) == ("n_kv_head", (1, 2, 4))
    assert e31.model == EXPERIMENTS["E2"].model and e31.eval_text == "split"
    assert {e31.configs(s, v)[0].n_head for s, v in e31.pairs()} == {4}
    # the matched arm: one key/value head with multi-head's parameters
    # (within 0.1%), the feed-forward layer the only other change
    assert e31.pairs() == [(4, 1), (4, 2), (4, 4), (4.75, 1)]
    mha, matched = e31.configs(4, 4)[0], e31.configs(4.75, 1)[0]
    assert dataclasses.replace(matched, n_kv_head=4, ffn_mult=4) == mha
    assert abs(gpt_param_count(matched) / gpt_param_count(mha) - 1) < 1e-3
    assert gpt_param_count(e31.configs(4, 1)[0]) < 0.9 * gpt_param_count(mha)


def test_arms_share_initial_weights_where_the_chapter_says():
    """Section "The decided reruns": at one seed, E22's, E23's and E26's
    arms start from identical weights, E25's too apart from the norms'
    biases (RMSNorm has none); E24's and E27's arms do not share them."""
    from transformer.experiments import Experiment
    shared = {"E22": True, "E23": True, "E25": True, "E26": True,
              "E24": False, "E27": False}
    for eid, want in shared.items():
        e: Experiment = EXPERIMENTS[eid]
        sds = [init_model(e.configs(s, v, 3)[0], 3).state_dict()
               for s, v in e.pairs()]
        for other in sds[1:]:
            common = [k for k in sds[0] if k in other
                      and sds[0][k].shape == other[k].shape]
            same = all(torch.equal(sds[0][k], other[k]) for k in common)
            assert same == want, eid
            if want:
                assert len(common) >= 0.8 * len(sds[0])


def test_e21_runs_each_arms_best_screened_cell():
    """Stage 2 of E6 rebuilt: for every arm but pre-norm (whose cells wait
    on amendment 1), E21's cell at each depth is the best finite cell of
    E19 and E20 (lowest held-out loss), at E6B_STEPS with the same warm-up
    fraction, the same final-lr rule, five seeds, on the whole split."""
    from transformer.placement import E6B_BEST, E6B_SEEDS, E6B_STEPS
    from transformer.experiments import load_runs
    e19, e21 = EXPERIMENTS["E19"], EXPERIMENTS["E21"]
    recs = load_runs("E19", ROOT) + load_runs("E20", ROOT)
    best = {k: (r["stratum"][1], r["stratum"][3] / e19.run["steps"])
            for k, r in _best_screened_cells(recs).items() if k[1] != "pre"}
    assert best == E6B_BEST
    got = {(s[0], v): s for s, v in e21.pairs()}
    assert set(got) == set(E6B_BEST)
    for (L, arm), (lr, f) in E6B_BEST.items():
        assert got[L, arm] == (L, lr, float(f"{lr / 10:.3g}"),
                               round(f * E6B_STEPS))
        mc, tc = e21.configs(got[L, arm], arm, 0)
        assert (mc.n_layer, tc.lr, tc.steps) == (L, lr, E6B_STEPS)
    assert e21.seeds == E6B_SEEDS and len(E6B_SEEDS) >= 5
    assert e21.eval_text == "split" and "grads_step10" in e21.extras


def test_e32_runs_pre_norms_best_screened_cell_like_e21():
    """Pre-norm's half of stage 2: its cell at each depth is the best
    finite cell of E19, E20 and E28 (all three complete), and everything
    else is E21's, so the two grids pair by seed."""
    from transformer.placement import E6B_BEST_PRE, E6B_STEPS
    from transformer.experiments import load_runs
    e19, e21, e32 = (EXPERIMENTS[k] for k in ("E19", "E21", "E32"))
    recs = []
    for k in ("E19", "E20", "E28"):
        got = load_runs(k, ROOT)
        assert len(got) == len(EXPERIMENTS[k].points()), k
        recs += got
    best = {k: (r["stratum"][1], r["stratum"][3] / e19.run["steps"])
            for k, r in _best_screened_cells(recs).items() if k[1] == "pre"}
    assert best == E6B_BEST_PRE
    got = {(s[0], v): s for s, v in e32.pairs()}
    assert set(got) == set(E6B_BEST_PRE)
    for (L, arm), (lr, f) in E6B_BEST_PRE.items():
        mc, tc = e32.configs(got[L, arm], arm, 0)
        assert (mc.n_layer, mc.norm_position, tc.lr, tc.steps,
                tc.warmup_steps) == (L, "pre", lr, E6B_STEPS,
                                     round(f * E6B_STEPS))
    for field in ("seeds", "run", "model", "extras", "eval_text", "metrics",
                  "screen"):
        assert getattr(e32, field) == getattr(e21, field), field


def test_e28_extends_the_pairs_whose_best_moved_to_3e_2():
    """Amendment 1 applied again: E28 runs lr 1e-1 for exactly the pairs
    whose best finite cell of E19 and E20 is at E20's 3e-2, with the same
    warm-ups, seed and budget."""
    from transformer.placement import E6B_EDGE2, E6B_NEXT_LR
    from transformer.experiments import load_runs
    e20, e28 = EXPERIMENTS["E20"], EXPERIMENTS["E28"]
    recs = load_runs("E19", ROOT) + load_runs("E20", ROOT)
    assert len(load_runs("E20", ROOT)) == len(e20.points())
    moved = {k for k, r in _best_screened_cells(recs).items()
             if r["stratum"][1] == E6B_NEXT_LR}
    assert set(E6B_EDGE2) == moved
    assert {(s[0], v) for s, v in e28.pairs()} == moved
    assert {s[1:3] for s, _ in e28.pairs()} == {(1e-1, 1e-2)}
    assert {s[3] for s, _ in e28.pairs()} == {s[3] for s in e20.strata}
    assert e28.seeds == e20.seeds and e28.run == e20.run


def test_target_met_is_the_one_target_vocabulary():
    """Performance targets: met when every interval clears the target,
    not met when one misses it wholly, else at the target; at_most
    mirrors it; a bare interval and (estimate, lo, hi) read the same."""
    from transformer.verdicts import TARGET_WORDS, target_met
    met, missed, at = TARGET_WORDS
    assert target_met([(1.6, 1.9)], 1.5) == met
    assert target_met([(1.7, 1.6, 1.9), (1.5, 1.5, 1.6)], 1.5) == met
    assert target_met([(1.6, 1.9), (1.0, 1.4)], 1.5) == missed
    assert target_met([(1.4, 1.6)], 1.5) == at
    assert target_met([(1.1, 1.0, 1.2)], 1.25, at_most=True) == met
    assert target_met([(1.3, 1.4)], 1.25, at_most=True) == missed
    assert target_met([(1.2, 1.3)], 1.25, at_most=True) == at
    with pytest.raises(ValueError, match="intervals: expected at least"):
        target_met([], 1.0)


def test_a_probe_record_is_stale_once_its_measurement_changes():
    """A probe's record carries its measurement by name and source hash
    (probe_config): the same probe matches it, a probe whose measure
    function differs does not, nor does a record made before probes
    carried a configuration (issue: --plan could not see a stale probe)."""
    from dataclasses import replace as _replace
    from transformer.experiments import probe_config, record_matches

    def measure(seed, smoke):
        return {"x": float(seed)}
    first = measure

    def measure(seed, smoke):  # noqa: F811  the same name, edited
        return {"x": float(seed) + 1}
    measure_edited = measure
    probe = Probe("E99", "t", first, "p", "f", seeds=(0,), metrics=("x",))
    rec = run_probe(probe, 0)
    assert rec["probe_config"] == probe_config(probe)
    assert rec["probe_config"]["measure"].endswith("measure")
    assert len(rec["config_hash"]) == 16
    assert record_matches(rec, probe, None, "-", 0)
    assert not record_matches(rec, _replace(probe, measure=measure_edited),
                              None, "-", 0)
    assert not record_matches(rec, _replace(probe, metrics=("x", "y")),
                              None, "-", 0)
    legacy = {k: v for k, v in rec.items() if k != "probe_config"}
    assert not record_matches(legacy, probe, None, "-", 0)


def test_a_moved_measurement_keeps_its_records():
    """A measurement moved to another module with its source unchanged
    (MOVED_MEASURES) is the same measurement: a record that names it under
    its old module still matches, by the same source hash; a record that
    names an old module not in the table, or has another hash, does not.
    The committed records of the moved probes all still match."""
    from transformer.experiments import (MOVED_MEASURES, plan_points,
                                         probe_config, record_matches)
    for old, new in MOVED_MEASURES.items():
        assert old.rsplit(".", 1)[1] == new.rsplit(".", 1)[1]
    moved = [e for e in EXPERIMENTS.values() if isinstance(e, Probe)
             and probe_config(e)["measure"] in MOVED_MEASURES.values()]
    assert len(moved) == len(MOVED_MEASURES)
    for exp in moved:
        now = probe_config(exp)
        old = next(o for o, n in MOVED_MEASURES.items()
                   if n == now["measure"])
        rec = {"smoke": False, "probe_config": {**now, "measure": old}}
        assert record_matches(rec, exp, None, "-")
        other = old.replace("transformer.ablations.", "transformer.other.")
        assert not record_matches(
            {**rec, "probe_config": {**now, "measure": other}}, exp, None,
            "-")
        assert not record_matches(
            {**rec, "probe_config": {**now, "measure": old,
                                     "source_sha256": "0" * 64}},
            exp, None, "-")
        plan = plan_points(exp)  # the committed records, made before it
        assert plan["stale"] == 0 and plan["done"], exp.id
        assert {r["probe_config"]["measure"] for r in plan["done"]} <= {
            old, now["measure"]}


def test_e37_extends_e25_by_its_own_spread():
    """E37 (declared before its runs): E25's two arms at the seeds E25
    lacks, up to the power rule's n for the standard deviation of E25's
    own per-seed differences, RMSNorm minus LayerNorm."""
    from transformer.ablations import DELTA, E37_SD, seeds_needed
    from transformer.experiments import load_runs
    e25, e37 = EXPERIMENTS["E25"], EXPERIMENTS["E37"]
    by = {(r["value"], r["seed"]): r["final"]["val_loss"]
          for r in load_runs("E25", ROOT)}
    d = [by["rmsnorm", k] - by["layernorm", k] for k in e25.seeds]
    m = sum(d) / len(d)
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1))
    assert E37_SD == pytest.approx(sd, abs=5e-5)
    n = seeds_needed(E37_SD, DELTA["E25"])
    assert e37.seeds == tuple(range(len(e25.seeds), n)) and n > 10
    assert e37.falsifier == e25.falsifier
    assert e37.prediction.startswith(e25.prediction)
    for f in ("variable", "values", "model", "run", "stratum", "strata",
              "eval_text", "metrics", "overrides", "extras"):
        assert getattr(e37, f) == getattr(e25, f), f


def test_e35_extends_e23_by_its_widest_claim_spread():
    """E35 (declared before its runs): E23's grid for the arms its claims
    name, at the seeds E23 lacks up to the power rule's n for the largest
    standard deviation of E23's own per-seed claim differences."""
    from transformer.ablations import DELTA, E35_SD, seeds_needed
    from transformer.experiments import load_runs
    e23, e35 = EXPERIMENTS["E23"], EXPERIMENTS["E35"]
    by = {(r["value"], r["seed"]): r["final"]["val_loss"]
          for r in load_runs("E23", ROOT)}
    sds = []
    for a, b in ((4, 1), (8, 4), (16, 4)):  # the claims' pairs
        d = [by[a, k] - by[b, k] for k in e23.seeds]
        m = sum(d) / len(d)
        sds.append(math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1)))
    assert E35_SD == pytest.approx(max(sds), abs=5e-5)
    n = seeds_needed(E35_SD, DELTA["E23"])
    assert e35.seeds == tuple(range(len(e23.seeds), n)) and n > 5
    assert e35.values == (1, 4, 8, 16)
    assert e35.falsifier == e23.falsifier
    assert e35.prediction.startswith(e23.prediction)
    for f in ("variable", "model", "run", "stratum", "strata", "eval_text",
              "metrics", "overrides", "extras"):
        assert getattr(e35, f) == getattr(e23, f), f


def test_a_probes_input_file_is_part_of_its_configuration(tmp_path,
                                                          monkeypatch):
    """E17 and E33 read the tiny model another command trains: its hash is
    in their configuration, so a retrained model makes their records
    stale; a probe without inputs has no such key (its older records stay
    current)."""
    import transformer.experiments as ex
    from transformer.calibration import CALIBRATION_CHECKPOINT
    from transformer.speculative import SPEC_TARGET
    assert EXPERIMENTS["E17"].inputs == (CALIBRATION_CHECKPOINT,)
    assert EXPERIMENTS["E33"].inputs == (SPEC_TARGET,)
    assert "inputs" not in ex.probe_config(EXPERIMENTS["E16"])
    monkeypatch.setattr(ex, "default_results_dir",
                        lambda: tmp_path / "results" / "experiments")
    probe = replace(EXPERIMENTS["E17"], inputs=("m.pt",))
    assert ex.probe_config(probe)["inputs"] == {"m.pt": None}
    (tmp_path / "m.pt").write_bytes(b"one")
    first = ex.probe_config(probe)
    (tmp_path / "m.pt").write_bytes(b"two")
    assert ex.probe_config(probe) != first
