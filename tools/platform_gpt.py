"""The platform-kernel reference: the book's architecture written the way the
most popular small GPT codebases write it, with PyTorch's fused modules.

`nn.Linear`, `F.scaled_dot_product_attention(..., is_causal=True)`,
`F.layer_norm`, `F.gelu(approximate="tanh")`, `F.cross_entropy` and
`torch.optim.AdamW`: the speed a user compares the book against. It lives in
tools/ because the permitted-library line forbids SDPA inside `transformer/`.
Same architecture as `transformer.GPT` with learned positions, pre-norm
LayerNorm, tanh GELU, tied embeddings and no dropout, and the same
initialisation, so that `load_from(ours)` copies a book model into it and the
tests can hold the logits equal (tests/test_platform_gpt.py).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.fc_out = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(D, dim=2)  # 3 x (B, T, D)
        q, k, v = (t.view(B, T, self.n_head, D // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # 3 x (B, H, T, Dh)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        h = F.gelu(self.fc(self.ln_2(x)), approximate="tanh")  # (B, T, 4D)
        return x + self.fc_out(h)  # (B, T, D)


class PlatformGPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int,
                 n_head: int, n_embd: int):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head)
                                    for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.apply(self._init)
        for block in self.blocks:  # GPT-2's scaled residual projections
            for lin in (block.proj, block.fc_out):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, D)
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # (B, T, V), tied
        loss = None if targets is None else F.cross_entropy(
            logits.flatten(0, 1), targets.flatten())
        return logits, loss

    @torch.no_grad()
    def load_from(self, ours) -> "PlatformGPT":
        """Copy a `transformer.GPT` (learned positions, pre-norm LayerNorm,
        tied weights) into this model. The book stores weights (in, out),
        nn.Linear (out, in): every matrix is transposed once here."""
        sd = dict(ours.named_parameters())

        def put(dst: torch.Tensor, name: str, transpose: bool = False):
            src = sd[name]
            dst.copy_(src.T if transpose else src)

        put(self.wte.weight, "wte.weight")
        put(self.wpe.weight, "wpe.weight")
        for i, b in enumerate(self.blocks):
            p = f"blocks.{i}."
            for mine, theirs in ((b.ln_1, "ln_1"), (b.ln_2, "ln_2")):
                put(mine.weight, p + theirs + ".weight")
                put(mine.bias, p + theirs + ".bias")
            for mine, theirs in ((b.qkv, "attn.c_attn"),
                                 (b.proj, "attn.c_proj"),
                                 (b.fc, "mlp.c_fc"), (b.fc_out, "mlp.c_proj")):
                put(mine.weight, p + theirs + ".weight", transpose=True)
                put(mine.bias, p + theirs + ".bias")
        put(self.ln_f.weight, "ln_f.weight")
        put(self.ln_f.bias, "ln_f.bias")
        return self
