"""Small real builders shared by the objective tests (role-id batches and a tiny causal LM)."""

from __future__ import annotations

import torch
from torch import nn

from openenv_echo.roles import PAD_ROLE_CODE, Role

C, A, E, W, P = Role.CONTEXT.code, Role.ACTION.code, Role.ENV_OUTPUT.code, Role.WARNING.code, PAD_ROLE_CODE


def roles(*rows: list[int]) -> torch.Tensor:
    """Right-pad rows of role codes with PAD into a (B, T) long tensor."""
    t = max(len(r) for r in rows)
    return torch.tensor([list(r) + [P] * (t - len(r)) for r in rows], dtype=torch.long)


def sample_role_ids() -> torch.Tensor:
    """Four multi-turn rows: prompt, actions, env bodies, warnings, scaffold, left and right padding."""
    return roles(
        [C, C, A, A, C, W, E, E, E, C, A, A],
        [C, A, A, A, C, E, C, A, P, P, P, P],
        [P, P, C, C, A, C, W, W, E, C, A, A],
        [C, E, C, A, A, C, E, E, E, E, C, A],  # an env token before the first action (reset observation)
    )


class TinyLM(nn.Module):
    """Embedding -> GRU -> Linear causal LM: small, deterministic, real gradients."""

    def __init__(self, vocab: int = 32, hidden: int = 16, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = nn.Embedding(vocab, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.emb(ids))
        return self.head(h)


def random_ids(role_ids: torch.Tensor, vocab: int = 32, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, role_ids.shape, generator=g)
    return ids.masked_fill(role_ids == P, 0)
