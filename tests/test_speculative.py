"""Speculative decoding (chapter "Speculative decoding"): the output law is the
target's, exactly (float64 algebra) and by sampling (chi-square with its threshold
fixed here, before any run), greedy equals greedy, and the caches roll back."""
import itertools

import pytest
import torch

from transformer.kv_cache import generate, make_caches
from transformer.model import GPT, GPTConfig
from transformer.speculative import (acceptance_probs, bigram_draft,
                                     decoding_probs, residual_law,
                                     speculative_generate, verify_round)

pytestmark = pytest.mark.usefixtures("one_thread")  # toy models: overhead

V = 12
CHI2_11_999 = 31.264   # 0.1% critical value, chi-square with 11 dof
CHI2_15_999 = 37.697   # 0.1% critical value, chi-square with 15 dof


def random_law(g, V=V, sharp=2.0):
    return torch.softmax(torch.randn(V, generator=g, dtype=torch.float64)
                         * sharp, -1)


def one_round_law(p, q):
    """The first emitted token's law, from the code's own rule (no draws)."""
    every = torch.arange(p.shape[-1])
    n = p.shape[-1]
    a = acceptance_probs(p.expand(n, n), q.expand(n, n), every)  # (V,)
    return q * a + (1 - (q * a).sum()) * residual_law(p, q)


@pytest.mark.parametrize("seed", range(5))
def test_one_round_law_is_exactly_p(seed):
    g = torch.Generator().manual_seed(seed)
    p, q = random_law(g), random_law(g)
    torch.testing.assert_close(one_round_law(p, q), p, rtol=0, atol=1e-12)


def test_one_round_law_with_zeros_in_p_and_q():
    # top-k processing puts exact zeros in both laws: the rule must hold.
    p = torch.tensor([0.5, 0.5, 0, 0], dtype=torch.float64)
    q = torch.tensor([0, 0.25, 0.25, 0.5], dtype=torch.float64)
    law = torch.zeros(4, dtype=torch.float64)
    for d in (1, 2, 3):  # q > 0 only there
        a = acceptance_probs(p[None], q[None], torch.tensor([d]))[0]
        law[d] += q[d] * a
        law += q[d] * (1 - a) * residual_law(p, q)
    torch.testing.assert_close(law, p, rtol=0, atol=1e-12)


def test_joint_law_of_two_tokens_is_exactly_p():
    """gamma = 2 on table 'models': p1, p2[x1] (target), q1, q2[x1] (draft).
    Either both tokens come from one round (d1 accepted, then d2 accepted or
    replaced) or x1 is a replacement and x2 the next round's first token."""
    g = torch.Generator().manual_seed(7)
    n = 8
    p1, q1 = random_law(g, n), random_law(g, n)
    p2 = torch.stack([random_law(g, n) for _ in range(n)])  # (n, n)
    q2 = torch.stack([random_law(g, n) for _ in range(n)])
    joint = torch.zeros(n, n, dtype=torch.float64)
    every = torch.arange(n)
    a1 = acceptance_probs(p1.expand(n, n), q1.expand(n, n), every)
    r1 = residual_law(p1, q1)
    for d1 in range(n):
        # accepted: position 2 of the same round follows p2[d1], q2[d1]
        joint[d1] += q1[d1] * a1[d1] * one_round_law(p2[d1], q2[d1])
        # rejected: x1 from the residual, x2 from the next round
        for x1 in range(n):
            joint[x1] += q1[d1] * (1 - a1[d1]) * r1[x1] * \
                one_round_law(p2[x1], q2[x1])
    torch.testing.assert_close(joint, p1[:, None] * p2, rtol=0, atol=1e-12)


def chi2(counts, probs):
    n = counts.sum()
    return float(((counts - n * probs) ** 2 / (n * probs)).sum())


def first_tokens(p, q, propose, n=20_000, seed=1):
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(p.shape[0], dtype=torch.float64)
    for _ in range(n):
        d = propose(gen)
        k, tok = verify_round(torch.stack([p, p]), q[None], d, gen)
        counts[d[0] if k else tok] += 1
    return counts


def test_verify_round_samples_p_and_the_greedy_draft_bug_does_not():
    g = torch.Generator().manual_seed(3)
    p, q = random_law(g), random_law(g)
    honest = first_tokens(p, q, lambda gen: torch.multinomial(q, 1,
                                                              generator=gen))
    buggy = first_tokens(p, q, lambda gen: q.argmax()[None])
    assert chi2(honest, p) < CHI2_11_999
    assert chi2(buggy, p) > CHI2_11_999


def tiny_pair(V=8, seed=0):
    torch.manual_seed(seed)
    target = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2,
                           n_embd=16)).eval()
    draft = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=1,
                          n_embd=8)).eval()
    with torch.no_grad():  # sharpen both so p and q differ visibly
        target.lm_head.weight.mul_(8)
        draft.lm_head.weight.mul_(8)
    return target, draft


@torch.no_grad()
def target_two_token_law(target, prompt):
    V = target.config.vocab_size
    p1 = decoding_probs(target(prompt)[0][0, -1].double())  # (V,)
    seqs = torch.cat([prompt.expand(V, -1), torch.arange(V)[:, None]], 1)
    p2 = decoding_probs(target(seqs)[0][:, -1].double())  # (V, V)
    return p1[:, None] * p2


def test_model_loop_samples_the_target_law_by_chi_square():
    """5,000 rows of two tokens with gamma = 1 through the whole loop (the
    rule alone gets 20,000 rounds above): the joint law of the pair against
    the target's own, 15 degrees of freedom (16 cells)."""
    V = 4
    target, draft = tiny_pair(V)
    prompt = torch.tensor([[1, 2]])
    law = target_two_token_law(target, prompt).flatten()  # (16,)
    n = 5_000
    out = speculative_generate(target, draft, prompt.expand(n, -1), 2,
                               gamma=1,
                               generator=torch.Generator().manual_seed(0))
    cell = out[:, 2] * V + out[:, 3]
    counts = torch.bincount(cell, minlength=V * V).double()
    assert chi2(counts, law) < CHI2_15_999


@pytest.mark.parametrize("gamma", [1, 2, 3, 5])
def test_greedy_equals_greedy_token_for_token(gamma):
    target, draft = tiny_pair(seed=1)
    prompt = torch.tensor([[3, 1, 4], [1, 5, 2]])
    plain = generate(target, prompt, 12, temperature=0)
    fast = speculative_generate(target, draft, prompt, 12, gamma=gamma,
                                temperature=0)
    assert torch.equal(fast, plain)


def test_greedy_with_a_bigram_draft_equals_greedy():
    target, _ = tiny_pair(seed=2)
    ids = torch.randint(0, 8, (500,), generator=torch.Generator()
                        .manual_seed(0))
    draft = bigram_draft(ids, 8)
    prompt = torch.tensor([[2, 2]])
    assert torch.equal(
        speculative_generate(target, draft, prompt, 10, gamma=4,
                             temperature=0),
        generate(target, prompt, 10, temperature=0))


@torch.no_grad()
def test_batched_verification_logits_equal_single_steps():
    """One call over gamma + 1 positions against the cache gives the logits
    of gamma + 1 single steps, to float32 tolerance (different matmul
    shapes may round differently: the reason greedy can flip on a near-tie
    in other libraries)."""
    target, _ = tiny_pair(seed=4)
    seq = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    wide = make_caches(target, 1, 16)
    target(seq[:, :3], caches=wide)
    batched = target(seq[:, 3:], start_pos=3, caches=wide)[0]  # (1, 4, V)
    step = make_caches(target, 1, 16)
    target(seq[:, :3], caches=step)
    single = torch.cat([target(seq[:, t:t + 1], start_pos=t, caches=step)[0]
                        for t in range(3, 7)], 1)
    torch.testing.assert_close(batched, single, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_rolled_back_cache_equals_a_fresh_one():
    target, _ = tiny_pair(seed=5)
    seq = torch.tensor([[1, 2, 3, 4, 5, 6]])
    caches = make_caches(target, 1, 16)
    target(seq, caches=caches)  # six positions
    for c in caches:
        c.length = 3  # roll back to the first three
    after = target(torch.tensor([[7]]), start_pos=3, caches=caches)[0]
    fresh = target(torch.tensor([[1, 2, 3, 7]]))[0][:, -1:]
    torch.testing.assert_close(after, fresh, rtol=1e-5, atol=1e-6)


def test_top_k_sampling_is_the_target_rule():
    """With top_k, tokens outside the target's top k never appear."""
    target, draft = tiny_pair(seed=6)
    prompt = torch.tensor([[1]])
    out = speculative_generate(target, draft, prompt.expand(300, -1), 1,
                               gamma=1, top_k=2,
                               generator=torch.Generator().manual_seed(0))
    allowed = set(target(prompt)[0][0, -1].topk(2).indices.tolist())
    assert set(out[:, 1].tolist()) <= allowed


@pytest.mark.parametrize("kwargs, message", [
    (dict(gamma=0), "gamma: expected an int >= 1"),
    (dict(gamma=True), "gamma: expected an int >= 1"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=40), "block_size"),
    (dict(temperature=-1), "temperature"),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    target, draft = tiny_pair()
    args = dict(max_new_tokens=3, gamma=2) | kwargs
    with pytest.raises(ValueError, match=message):
        speculative_generate(target, draft, torch.tensor([[1]]), **args)


def test_a_draft_with_another_vocabulary_is_refused():
    target, _ = tiny_pair()
    other = GPT(GPTConfig(vocab_size=9, block_size=16, n_layer=1, n_head=1,
                          n_embd=8))
    with pytest.raises(ValueError, match=r"draft: its vocabulary \(9\) "
                       r"differs from the target's \(8\)"):
        speculative_generate(target, other, torch.tensor([[1]]), 2)


# ------------------------------------------------ the command line: --draft
from test_cli import TINY, errors, own_text, text  # noqa: E402,F401
from transformer import cli  # noqa: E402


def test_sample_with_a_draft_equals_greedy_and_refuses_bad_drafts(
        text, tmp_path, capsys):  # noqa: F811
    target, draft, other = (tmp_path / n for n in ("t.pt", "d.pt", "o.pt"))
    assert cli.main(own_text(text, target, "--set", "steps=3")) == 0
    assert cli.main(own_text(text, draft, "--set", "steps=3",
                             "--set", "n_embd=16")) == 0
    args = ["sample", "--checkpoint", str(target), "--prompt", "Shall I",
            "--max-new-tokens", "8", "--temperature", "0"]
    capsys.readouterr()
    assert cli.main(args) == 0
    plain = capsys.readouterr().out
    assert cli.main(args + ["--draft", str(draft), "--gamma", "3"]) == 0
    assert capsys.readouterr().out == plain
    assert cli.main(args + ["--gamma", "3"]) == 2
    (line,) = errors(capsys)
    assert "--gamma: only with --draft" in line
    assert cli.main(args + ["--draft", str(draft), "--gamma", "0"]) == 2
    assert "--gamma: expected an int >= 1" in errors(capsys)[-1]
    other_args = own_text(text, other, "--set", "steps=1")
    other_args[other_args.index("300")] = "280"  # another vocabulary
    assert cli.main(other_args) == 0
    capsys.readouterr()
    assert cli.main(args + ["--draft", str(other)]) == 2
    (line,) = errors(capsys)
    assert "--draft:" in line and "another tokenizer" in line
