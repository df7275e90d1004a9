"""The reference implementations the tests and benchmarks compare against,
built in one place: Hugging Face GPT-2 with the shape of a `GPTConfig`, and
a `tiktoken` encoding with the ranks of a `BPETokenizer`. Never imported by
`transformer/` (the permitted-library line)."""
from __future__ import annotations

import torch


def hf_gpt2(config, attn: str = "eager", seed: int = 0):
    """A randomly initialised `GPT2LMHeadModel` of `config`'s shape (through
    `transformer.hf_files.hf_gpt2_config`, the export's own mapping), in eval
    mode, with the attention implementation `attn`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from transformer.hf_files import hf_gpt2_config

    torch.manual_seed(seed)
    cfg = GPT2Config.from_dict(hf_gpt2_config(config))
    model = GPT2LMHeadModel._from_config(cfg, attn_implementation=attn)
    assert model.config._attn_implementation == attn
    return model.eval()


@torch.no_grad()  # on a generator: grad mode is off only while it runs
def hf_greedy_stream(hf, prompt: torch.Tensor, n: int):
    """Hugging Face's model decoding greedily with its own cache, shaped
    like `transformer.kv_cache.decode_stream(model, prompt, n,
    temperature=0)`: the prompt (1, T0) once, then one token per step;
    yields each of the n new tokens, (1,) int64, as it is chosen, so a
    benchmark can time (or profile) one step per `next`."""
    out = hf(input_ids=prompt, use_cache=True)  # prefill
    for i in range(n):
        nxt = out.logits[:, -1].argmax(-1)  # (1,)
        yield nxt
        if i + 1 == n:
            break
        out = hf(input_ids=nxt[:, None], past_key_values=out.past_key_values,
                 use_cache=True)  # (1, 1, V) logits


def tiktoken_of(tok, name: str = "book-bpe"):
    """A `tiktoken.Encoding` with the ranks, pattern and special tokens of
    the book's `BPETokenizer` `tok` (ids are ranks, so they must agree)."""
    import tiktoken

    ranks = {tok.vocab[i]: i for i in range(256 + len(tok.merges))}
    assert len(ranks) == 256 + len(tok.merges)  # no two ids share bytes
    return tiktoken.Encoding(name, pat_str=tok.pattern,
                             mergeable_ranks=ranks,
                             special_tokens=dict(tok.special_tokens))
