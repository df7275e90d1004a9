"""E15b's multi-query recall task, its arms, its gate and its diagnostics
(chapter "Ablations", section "E15b")."""
import json
import math
from pathlib import Path

import pytest
import torch

from transformer.lookup import (LOOKUP_TASK, LookupMLP, attention_maps,
                                evaluate_lookup, induction_score,
                                lookup_batch, lookup_gate, lookup_gpt,
                                lookup_mlp, lookup_mlp_params, loglog_slope,
                                previous_token_score,
                                train_lookup)

ROOT = Path(__file__).resolve().parents[1]
K, V = LOOKUP_TASK["n_keys"], LOOKUP_TASK["n_values"]
W, T = LOOKUP_TASK["window"], LOOKUP_TASK["seq_len"]


def _batch(n=64, seed=0, **task):
    return lookup_batch(n, torch.Generator().manual_seed(seed),
                        {**LOOKUP_TASK, **task})


def test_alphabets_are_disjoint_and_each_answer_is_the_bound_value():
    d = _batch(64)
    x, answer, target, dist = d["x"], d["answer"], d["target"], d["dist"]
    assert x.shape == (64, T) and answer.dtype == torch.bool
    keys, vals = x[:, 0::2], x[:, 1::2]  # (B, T/2) each
    # a slot is a key then a value, or a filler pair
    filler = K + V
    is_pair = (keys < K) & (vals >= K) & (vals < K + V)
    is_fill = (keys == filler) & (vals == filler)
    assert bool((is_pair | is_fill).all())
    assert not bool(answer[:, 1::2].any())  # answers sit at keys only
    for b in range(64):
        seen = {}  # key -> (position, value) of its binding
        queried = set()
        for p in range(0, T, 2):
            k, v = int(x[b, p]), int(x[b, p + 1])
            if k == filler:
                assert not bool(answer[b, p])
                continue
            if bool(answer[b, p]):
                # a query: a key bound earlier, asked once, its own value
                assert k in seen and k not in queried
                queried.add(k)
                assert v == seen[k][1] == int(target[b, p])
                assert int(dist[b, p]) == p - seen[k][0]
                vals_so_far = [val for _, val in seen.values()]
                assert int(d["n_bound"][b, p]) == len(vals_so_far)
                share = vals_so_far.count(v) / len(vals_so_far)
                assert abs(float(d["copy"][b, p]) - share) < 1e-6
            else:
                assert k not in seen  # each key bound once
                seen[k] = (p, v)
    assert bool((target[~answer] == 0).all()) and bool((dist[~answer] == 0).all())


def test_distances_follow_the_declared_near_far_rule():
    d = _batch(2000, seed=3)
    dist = d["dist"][d["answer"]]
    assert bool((dist >= 2).all()) and bool((dist % 2 == 0).all())
    assert int(dist.max()) <= T - 2
    inside = (dist <= W - 1).float().mean().item()
    # half the queries go near whenever both groups exist; near is also
    # the only group early on, so the share is above one half
    assert 0.5 < inside < 0.8, inside
    # a hand count: with only near bindings open, every query is near
    small = _batch(500, seed=4, seq_len=8)  # 4 slots: distances 2..6
    dd = small["dist"][small["answer"]]
    assert bool((dd <= 6).all()) and dd.numel() > 100


def test_the_task_is_deterministic_per_seed_and_varies_across_seeds():
    a, b, c = _batch(16, 5), _batch(16, 5), _batch(16, 6)
    for key in a:
        assert torch.equal(a[key], b[key])
    assert not torch.equal(a["x"], c["x"])


@pytest.mark.parametrize("bad, msg", [
    ({"seq_len": 7}, "seq_len"), ({"window": 6}, "window"),
    ({"query_prob": 1.0}, "query_prob"), ({"n_keys": 0}, "n_keys"),
    ({"keys": 3}, "unknown")])
def test_bad_task_fields_are_named(bad, msg):
    with pytest.raises(ValueError, match=msg):
        lookup_batch(2, torch.Generator().manual_seed(0),
                     {**LOOKUP_TASK, **bad})


def test_the_window_mlp_sees_exactly_its_window():
    mlp = lookup_mlp(LOOKUP_TASK, W, 8, hidden=16, seed=0)
    assert sum(p.numel() for p in mlp.parameters()) == lookup_mlp_params(
        K + V + 1, W, 8, 16)
    x = _batch(4)["x"]
    y = x.clone()
    y[:, : T - W] = (y[:, : T - W] + 1) % (K + V)  # change what lies outside
    with torch.no_grad():
        a, b = mlp(x)[0][:, -1], mlp(y)[0][:, -1]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    y[:, T - W] = (y[:, T - W] + 1) % (K + V)  # the window's first token
    with torch.no_grad():
        assert not torch.allclose(mlp(y)[0][:, -1], a)
    ref = lookup_gpt(LOOKUP_TASK, 32, 2).n_params()
    matched = lookup_mlp(LOOKUP_TASK, W, 16, match=ref)
    n = sum(p.numel() for p in matched.parameters())
    assert abs(n - ref) <= 0.10 * ref


def test_torch_init_differs_from_gpt2_and_follows_pytorch_bounds():
    g2 = lookup_gpt(LOOKUP_TASK, 32, 2, "gpt2", seed=0)
    tt = lookup_gpt(LOOKUP_TASK, 32, 2, "torch", seed=0)
    w = tt.blocks[0].attn.c_attn.weight  # (32, 96): fan_in 32
    assert float(w.abs().max()) <= 1 / math.sqrt(32) + 1e-7
    assert float(w.std()) > 0.1 and float(g2.blocks[0].attn.c_attn.weight.std()) < 0.03
    assert abs(float(tt.wte.weight.std()) - 1.0) < 0.05
    with pytest.raises(ValueError, match="init"):
        lookup_gpt(LOOKUP_TASK, 32, 2, "xavier")


def _gate_eval(acc_in, acc_out):
    return {"acc_in": acc_in, "acc_out": acc_out, "chance": 1 / V}


def test_the_gate_passes_only_when_every_condition_holds():
    good_a, good_m = _gate_eval(0.99, 0.97), _gate_eval(0.98, 1 / V + 0.01)
    assert lookup_gate([good_a] * 3, [good_m] * 3)["passed"]
    # each condition alone fails it, at its own boundary
    for attn, mlp, what in [
            ([good_a, _gate_eval(0.949, 0.99)], [good_m], "acc_in"),
            ([good_a, _gate_eval(0.99, 0.949)], [good_m], "acc_out"),
            ([good_a], [_gate_eval(0.94, 0.0)], "acc_in"),
            ([good_a], [_gate_eval(0.99, 1 / V + 0.031)], "acc_out"),
            ([_gate_eval(0.99, None)], [good_m], "acc_out")]:
        g = lookup_gate(attn, mlp)
        assert not g["passed"] and any(what in m for m in g["misses"]), g
    assert lookup_gate([_gate_eval(0.95, 0.95)],
                       [_gate_eval(0.95, 1 / V + 0.03)])["passed"]
    with pytest.raises(ValueError):
        lookup_gate([], [good_m])


def test_diagnostics_on_hand_built_attention_patterns():
    d = _batch(8, seed=2)
    x, answer, dist = d["x"], d["answer"], d["dist"]
    B = x.shape[0]
    eye = torch.eye(T)
    prev = torch.zeros(T, T)
    prev[0, 0] = 1.0
    prev[torch.arange(1, T), torch.arange(T - 1)] = 1.0  # head 0: t -> t-1
    w = torch.stack([prev, eye])[None].expand(B, 2, T, T)  # head 1: self
    s = previous_token_score(w, x, K)
    torch.testing.assert_close(s, torch.tensor([1.0, 0.0]), rtol=0, atol=0)
    # an induction head: each query onto the position after its key
    ind = torch.zeros(B, 2, T, T)
    ind[:, 1] = eye
    b, q = answer.nonzero(as_tuple=True)
    ind[b, 0, q, q - dist[b, q] + 1] = 1.0
    torch.testing.assert_close(induction_score(ind, answer, dist),
                               torch.tensor([1.0, 0.0]), rtol=0, atol=0)
    # off by one (onto the key itself) scores zero: the score is exact
    off = torch.zeros(B, 1, T, T)
    off[b, 0, q, q - dist[b, q]] = 1.0
    assert float(induction_score(off, answer, dist)[0]) == 0.0


def test_attention_maps_are_the_models_own_weights():
    model = lookup_gpt(LOOKUP_TASK, 16, 2, "torch", seed=1)
    x = _batch(3)["x"]
    maps = attention_maps(model, x)
    assert len(maps) == 2 and maps[0].shape == (3, 2, T, T)
    torch.testing.assert_close(maps[1].sum(-1), torch.ones(3, 2, T),
                               rtol=0, atol=1e-5)
    assert float(maps[0].triu(1).abs().max()) == 0.0  # causal
    # the recomputed layer-1 weights reproduce the block's output
    blk = model.blocks[0]
    h = blk.ln_1(model.wte(x))
    v = blk.attn.c_attn(h).split(16, -1)[2].view(3, T, 2, 8).transpose(1, 2)
    out = (maps[0] @ v).transpose(1, 2).reshape(3, T, 16)
    with torch.no_grad():
        torch.testing.assert_close(blk.attn.c_proj(out), blk.attn(h),
                                   rtol=1e-4, atol=1e-5)


def test_the_mlp_at_the_answers_only_is_the_same_function_and_gradient():
    """Amendment 4: LookupMLP.logits_at computes only the answer positions;
    logits, loss and every parameter's gradient equal the whole-sequence
    computation's up to float rounding (the sums run in another order)."""
    from transformer.lookup import _AnswerLoss
    task = {**LOOKUP_TASK, "seq_len": 32}
    d = _batch(16, **task)
    x, y = d["x"], (d["answer"], d["target"])
    mlp = lookup_mlp(task, 32, 8, hidden=16, seed=0)
    with torch.no_grad():
        torch.testing.assert_close(mlp.logits_at(x, d["answer"]),
                                   mlp(x)[0][d["answer"]],
                                   rtol=1e-5, atol=1e-6)
    grads = []
    for fast in (False, True):
        mlp.zero_grad()
        z, loss = _AnswerLoss(mlp, fast)(x, y)
        assert z.shape == ((d["answer"].sum(), K + V + 1) if fast
                           else (16, 32, K + V + 1))
        loss.backward()
        grads.append([p.grad.clone() for p in mlp.parameters()])
    for a, b in zip(*grads):
        assert a.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="at: expected a bool tensor"):
        mlp.logits_at(x, d["answer"].long())
    with pytest.raises(ValueError, match="answers_only: computes a LookupMLP"):
        train_lookup(lookup_gpt(task, 8, 1), task, 2, 4, 1e-3, 0,
                     answers_only=True)


def test_training_is_deterministic_and_scores_answers_only():
    a = lookup_gpt(LOOKUP_TASK, 8, 1, seed=0)
    b = lookup_gpt(LOOKUP_TASK, 8, 1, seed=0)
    ha = train_lookup(a, LOOKUP_TASK, 3, 4, 1e-3, seed=7, warmup_steps=1)
    hb = train_lookup(b, LOOKUP_TASK, 3, 4, 1e-3, seed=7, warmup_steps=1)
    assert ha["train_loss"] == hb["train_loss"]
    ev = evaluate_lookup(a, LOOKUP_TASK, 64)
    assert ev["n"] == int(_batch(64, seed=8765)["answer"].sum())
    assert 0.0 <= ev["acc_in"] <= 1.0 and ev["chance"] == 1 / V
    assert abs(ev["acc"] - (ev["acc_in"] * ev["n_in"] + ev["acc_out"]
                            * (ev["n"] - ev["n_in"])) / ev["n"]) < 1e-6


def test_loglog_slope():
    assert abs(loglog_slope([32, 64, 128, 256], [10, 10, 10, 10])) < 1e-12
    assert abs(loglog_slope([32, 64, 128], [3, 6, 12]) - 1.0) < 1e-12
    with pytest.raises(ValueError):
        loglog_slope([1], [1])


def test_a_killed_run_resumes_bit_identically(tmp_path):
    from transformer.training import TrainingInterrupted
    full = train_lookup(lookup_gpt(LOOKUP_TASK, 8, 1, seed=0), LOOKUP_TASK,
                        6, 4, 1e-3, seed=7, warmup_steps=1)["train_loss"]
    path = tmp_path / "run.pt"

    def kill(step, history):
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        train_lookup(lookup_gpt(LOOKUP_TASK, 8, 1, seed=0), LOOKUP_TASK, 6, 4,
                     1e-3, seed=7, warmup_steps=1, callback=kill,
                     checkpoint_path=path, checkpoint_interval=3)
    h = train_lookup(lookup_gpt(LOOKUP_TASK, 8, 1, seed=0), LOOKUP_TASK, 6, 4,
                     1e-3, seed=7, warmup_steps=1, checkpoint_path=path,
                     checkpoint_interval=3)
    assert h["resumed_from"] in (3, 4) and h["train_loss"] == full


def test_the_ladder_runs_smallest_first_and_stops_at_the_first_pass(
        tmp_path, monkeypatch):
    """Amendment 1's rule in tools/run_lookup.py: a (phase, family, T)
    rung list is cut after the first rung whose record passes, so its
    first passing rung is exactly the smallest that passes; attention
    passes only if the far queries pass too."""
    import run_lookup  # tools/, on sys.path through the root conftest

    monkeypatch.setattr(run_lookup, "OUT", tmp_path)
    monkeypatch.setattr(run_lookup, "select", lambda: {
        "attn": {"lr": 1e-2, "init": "gpt2", "steps": 4000},
        "mlp": {"lr": 1e-2}})
    jobs = run_lookup._ladder("ladder_h2", 64)
    assert [j["size"]["n_embd"] for j in jobs] == [8, 16, 32, 64]

    def land(job, acc, far):
        (tmp_path / job["phase"]).mkdir(exist_ok=True)
        rec = {**job, "final": {"acc": acc, "acc_far": far}}
        (tmp_path / job["phase"] / f"{job['name']}.json").write_text(
            json.dumps(rec))
        return rec
    assert not run_lookup.passes(land(jobs[0], 0.99, 0.90))  # far misses
    assert run_lookup.passes(land(jobs[1], 0.96, None))  # no far queries
    cut = run_lookup._ladder("ladder_h2", 64)
    assert [j["size"]["n_embd"] for j in cut] == [8, 16]
    # the MLP family of the declared ladder is cut on its own records
    mlp = [j for j in run_lookup._ladder("ladder", 64) if j["arm"] == "mlp"]
    assert [j["size"]["hidden"] for j in mlp] == [32, 64, 128, 256, 512]
    land(mlp[0], 0.97, None)
    mlp = [j for j in run_lookup._ladder("ladder", 64) if j["arm"] == "mlp"]
    assert [j["size"]["hidden"] for j in mlp] == [32]
    order = run_lookup.ladders_jobs()
    assert order[0]["task"]["seq_len"] == 32 and order[0]["arm"] == "mlp"
    # amendment 2: at T = 256 the two-head rungs come before the MLP rungs
    at256 = [(j["arm"], j["size"].get("n_head")) for j in order
             if j["task"]["seq_len"] == 256]
    assert at256.index(("mlp", None)) > max(
        i for i, a in enumerate(at256) if a == ("attn", 2))
    # amendment 3: then the extended two-head run, the one-head rungs, and
    # the MLP rungs at T = 256 last
    (ext,) = [j for j in order if j["phase"] == "extend"]
    assert (ext["task"]["seq_len"], ext["steps"], ext["size"]) == (
        256, run_lookup.EXTENDED_STEPS, run_lookup.ATTN)
    assert order[-1]["arm"] == "mlp" and order[-1]["task"]["seq_len"] == 256
    last_h1 = max(i for i, j in enumerate(order)
                  if j["size"].get("n_head") == 1)
    assert order.index(ext) < last_h1 < min(
        i for i, j in enumerate(order)
        if j["arm"] == "mlp" and j["task"]["seq_len"] == 256)
    # amendment 4: the MLP rungs at T = 256 from hidden 128 train at the
    # answer positions only, under their declared names; amend4 reruns the
    # narrower two that way, with files of its own
    fast = {j["size"]["hidden"]: j.get("answers_only", False) for j in order
            if j["arm"] == "mlp" and j["task"]["seq_len"] == 256}
    assert fast == {32: False, 64: False, 128: True, 256: True, 512: True}
    assert not any(j.get("answers_only") for j in order
                   if j["task"]["seq_len"] < 256 or j["arm"] == "attn")
    again = run_lookup.amend4_jobs()
    assert [(j["phase"], j["size"]["hidden"], j["answers_only"])
            for j in again] == [("amend4", 32, True), ("amend4", 64, True)]
    (first,) = [j for j in order if j["arm"] == "mlp"
                and j["task"]["seq_len"] == 256 and j["size"]["hidden"] == 32]
    assert again[0]["name"] == first["name"]
    assert run_lookup._scratch(again[0], ".pt") != run_lookup._scratch(
        first, ".pt")


@pytest.mark.parametrize("case", ["none", "earlier", "saved"])
def test_an_interrupted_rung_says_truthfully_what_it_kept(
        case, tmp_path, monkeypatch, capsys):
    """Ctrl-C or SIGTERM during a rung: the one line names what is on disk.
    No checkpoint written and none before: the steps are lost (the window
    MLP never checkpoints); an earlier checkpoint kept: it is as it was; a
    checkpoint written: the step it holds."""
    import signal

    import run_lookup
    from transformer.training import TrainingInterrupted
    job = {"name": "mlp_T=256_x", "phase": "ladder"}
    monkeypatch.setattr(run_lookup, "OUT", tmp_path / "out")
    monkeypatch.setattr(run_lookup, "CKPT", tmp_path / "ckpt")
    monkeypatch.setitem(run_lookup.JOBS, "ladder", lambda: [job])
    saved = 250 if case == "saved" else None
    if case == "earlier":
        (tmp_path / "ckpt").mkdir()
        (tmp_path / "ckpt" / f"{job['name']}.pt").write_bytes(b"old")

    def interrupted(job):
        raise TrainingInterrupted(300, saved, signal.SIGTERM)
    monkeypatch.setattr(run_lookup, "run", interrupted)
    assert run_lookup.main(["ladder"]) == 128 + signal.SIGTERM
    line = capsys.readouterr().err.strip()
    assert line.startswith("mlp_T=256_x: interrupted by SIGTERM at step 300")
    want = {"none": "no checkpoint was written",
            "earlier": "is as it was", "saved": "holds step 250"}[case]
    assert want in line and "\n" not in line
    assert ("300 steps are lost" in line) == (case == "none")


def test_every_e15b_record_is_one_the_declaration_asks_for():
    """`run_lookup.py paths` (what `experiment e15b` must have) names
    every committed record, so none is orphaned and the item's state is
    read from all of them."""
    import run_lookup
    listed = {run_lookup.record_path(j) for j in run_lookup.all_jobs()}
    on_disk = {p for p in run_lookup.OUT.glob("*/*.json")
               if p.parent != run_lookup.BRIDGES}
    assert on_disk and on_disk <= listed, sorted(on_disk - listed)[:3]


def test_a_bridge_prefix_retrains_a_record_bit_for_bit(tmp_path,
                                                       monkeypatch):
    """The premise of E15b's bridges: PREFIX, run in a checkout by a fresh
    Python, trains a record's job exactly as the run that wrote the record
    did (the same losses to the last bit), and its steps stop where asked."""
    import run_lookup
    monkeypatch.setattr(run_lookup, "CKPT", tmp_path / "ckpt")
    task = {**LOOKUP_TASK, "seq_len": 16}
    for job in (run_lookup._job("ladder", "attn", 0, 1e-2, "gpt2", 60, task,
                                n_embd=8, n_head=2),
                run_lookup._job("ladder", "mlp", 0, 1e-2, steps=60, task=task,
                                window=16, n_embd=8, hidden=16),
                run_lookup._job("amend4", "mlp", 0, 1e-2, steps=60, task=task,
                                answers_only=True, window=16, n_embd=8,
                                hidden=16)):
        rec = run_lookup.run(job)
        path = tmp_path / f"{job['phase']}-{job['arm']}.json"
        path.write_text(json.dumps(rec))
        losses = run_lookup.prefix_losses(path, ROOT, 51)
        assert len(losses) == 51
        assert losses[::50] == rec["train_loss"][:2], job["arm"]


def test_e15b_bridges_name_their_records_and_hold():
    """Each committed bridge names a committed record made at its `from`
    commit, trained it as many steps as it says on both sides, and found
    the code then and the code at `to` alike, bit for bit."""
    import run_lookup
    bridges = sorted(run_lookup.BRIDGES.glob("*.json"))
    assert bridges
    for path in bridges:
        b = json.loads(path.read_text())
        rec = json.loads((run_lookup.OUT / b["record"]).read_text())
        assert rec["git_commit"] == b["from"] and rec["arm"] == b["arm"]
        assert len(b["from_losses"]) == len(b["to_losses"]) >= b["steps"]
        assert b["identical"] and b["from_losses"] == b["to_losses"], path


def test_the_seed_ladders_cut_per_seed_and_list_every_record(
        tmp_path, monkeypatch, capsys):
    """Amendment 5 (tools/run_lookup_seeds.py): per T and seed the
    two-head rungs run smallest first, cut after that seed's first pass;
    `paths` names every committed record; an interrupted rung says what
    its checkpoint holds, in one line."""
    import signal

    import run_lookup
    import run_lookup_seeds as rs
    from transformer.training import TrainingInterrupted
    committed = set(rs.OUT.glob("*.json"))
    listed = {rs.record_path(j) for j in rs.jobs()}
    assert committed <= listed, sorted(committed - listed)[:3]
    monkeypatch.setattr(rs, "OUT", tmp_path)
    monkeypatch.setattr(run_lookup, "CKPT", tmp_path / "ckpt")
    jobs = rs.jobs()
    assert [(j["task"]["seq_len"], j["seed"]) for j in jobs[::4]] == [
        (T, s) for T in rs.SEED_T for s in rs.SEEDS]
    assert {j["size"]["n_head"] for j in jobs} == {2}
    first = jobs[1]  # T = 32, seed 1, D = 16: passes, so D = 32, 64 go
    rs.record_path(first).write_text(json.dumps(
        {**first, "final": {"acc": 0.97, "acc_far": 0.96}}))
    cut = [j["size"]["n_embd"] for j in rs.jobs((1,))
           if j["task"]["seq_len"] == 32]
    assert cut == [8, 16]
    assert len(rs.jobs((2,))) == len(rs.SEED_T) * len(
        run_lookup.LADDER_ATTN_D)

    def interrupted(job):
        raise TrainingInterrupted(300, 250, signal.SIGTERM)
    monkeypatch.setattr(run_lookup, "run", interrupted)
    assert rs.main(["run", "--seed", "2"]) == 128 + signal.SIGTERM
    line = capsys.readouterr().err.strip()
    assert "seed=2: interrupted by SIGTERM at step 300" in line
    assert "holds step 250" in line and "\n" not in line
