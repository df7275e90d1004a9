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


def tiktoken_of(tok, name: str = "book-bpe"):
    """A `tiktoken.Encoding` with the ranks, pattern and special tokens of
    the book's `BPETokenizer` `tok` (ids are ranks, so they must agree)."""
    import tiktoken

    ranks = {tok.vocab[i]: i for i in range(256 + len(tok.merges))}
    assert len(ranks) == 256 + len(tok.merges)  # no two ids share bytes
    return tiktoken.Encoding(name, pat_str=tok.pattern,
                             mergeable_ranks=ranks,
                             special_tokens=dict(tok.special_tokens))
