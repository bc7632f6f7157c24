"""A mixture of experts on one process: a router, top-k, a capacity, dropped tokens, the balancing losses.

Introduced in lesson 13 (experts: a bigger model for the same compute).  A transformer block's MLP
becomes E MLPs, the *experts*, and a small linear *router* that scores every token against every
expert.  Each token goes to its ``top_k`` best-scoring experts only, so the model has E times the
MLP's parameters while a token pays for k MLPs: more parameters for the same arithmetic.

Three things make it trainable and runnable, all written out here:

* **the gate**: a token's output is its experts' outputs weighted by the router's probabilities (for
  k = 2 renormalised over the two, as GShard does), so the router learns through those weights;
* **the capacity** (``predict.traffic.capacity``): each expert takes at most
  ``ceil(capacity_factor x tokens x k / E)`` tokens of a group; the rest are *dropped* (their MLP
  output is zero, the residual carries them on).  GShard and Switch pad each expert's buffer
  to the capacity, so that the all-to-all's sizes are fixed; this course's ranks exchange the
  counts first (``expert_parallel``) and the capacity only limits what an expert takes.  First
  choices are
  served before second choices, each in token order (Lepikhin et al. 2020, GShard, section 2.2);
* **the balancing losses**: left alone, a router sends most tokens to the few experts that won early.
  Switch Transformer's auxiliary loss ``E x sum_e f_e P_e`` (Fedus et al. 2021, equation 4: ``f_e`` the
  share of tokens whose first choice is e, ``P_e`` the mean probability the router gives e) is smallest
  when both are uniform; the router z-loss (Zoph et al. 2022, ST-MoE, equation 5) keeps the logits small.

``groups``: the tokens are cut into equal groups and the capacity holds per group.  With expert
parallelism each rank routes its own tokens, so one process equals n ranks when it routes in n groups.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..predict.traffic import capacity


@dataclass(frozen=True)
class MoEConfig:
    """Lesson 13: the experts' settings in one place (as ``sequence.transformer.TransformerConfig``)."""

    experts: int = 4
    top_k: int = 1
    capacity_factor: float = 1.25
    aux_weight: float = 0.01        # Switch Transformer's balancing loss, times this, is added to the loss
    z_weight: float = 0.0           # the router z-loss's weight (0: not used)

    def __post_init__(self):
        for name in ("experts", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} asks for more experts per token than the {self.experts} there are")
        if isinstance(self.capacity_factor, bool) or not isinstance(self.capacity_factor, (int, float)) \
                or not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor must be a number above 0, got {self.capacity_factor!r}")
        for name in ("aux_weight", "z_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")


@dataclass
class Routing:
    """Where a group's tokens go: for each token and each of its k choices, the ``expert``, its ``gate``
    weight, whether it was ``kept`` (within capacity) and its ``slot`` in that expert's buffer."""

    expert: torch.Tensor      # (tokens, k) long
    gate: torch.Tensor        # (tokens, k)
    kept: torch.Tensor        # (tokens, k) bool
    slot: torch.Tensor        # (tokens, k) long
    probs: torch.Tensor       # (tokens, E): the router's probabilities


def route(logits: torch.Tensor, cfg: MoEConfig) -> Routing:
    """Lesson 13: one group's ``logits`` (tokens, E) -> top-k experts, gates, and who fits in each expert.

    The slots are handed out choice by choice, then token by token: a cumulative count of each
    expert's requests in that order is the slot; a slot at or past the capacity is a dropped token."""
    probs = torch.softmax(logits, dim=-1)
    gate, expert = probs.topk(cfg.top_k, dim=-1)
    if cfg.top_k > 1:
        gate = gate / gate.sum(dim=-1, keepdim=True)
    requests = F.one_hot(expert.t().reshape(-1), cfg.experts)           # (k x tokens, E), choice-major
    slot = ((requests.cumsum(dim=0) - 1) * requests).sum(dim=-1)         # this request's place in its queue
    slot = slot.view(cfg.top_k, -1).t()
    return Routing(expert, gate, slot < capacity(logits.shape[0], cfg), slot, probs)


def aux_loss(routing: Routing, experts: int) -> torch.Tensor:
    """Lesson 13: Switch Transformer's balancing loss, ``E x sum_e f_e P_e``: 1 when both are uniform.
    ``f_e`` counts first choices (no gradient: a count), ``P_e`` carries the gradient to the router."""
    f = torch.bincount(routing.expert[:, 0], minlength=experts).float() / routing.expert.shape[0]
    return experts * (f * routing.probs.mean(dim=0)).sum()


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """Lesson 13: ST-MoE's router z-loss, the mean squared log-sum-exp of the logits."""
    return torch.logsumexp(logits, dim=-1).pow(2).mean()


class Expert(nn.Module):
    """Lesson 13: one expert, the transformer's MLP (d -> hidden -> d, GELU)."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, hidden), nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MoE(nn.Module):
    """Lesson 13: the MLP of a block as E experts and a router, on one process (every expert here).

    ``forward(x)`` takes (..., d) and returns the same shape; ``last`` keeps what the latest forward
    routed (tokens asked of and kept by each expert, dropped requests, each token's first choice) and
    ``extra_loss`` its weighted balancing losses, which the micro-step (``train.step``) adds to the task's loss."""

    line_pieces = None     # one process standing for ranks that each hold a piece of every line (lesson 12)
    pieces_per_line = 1    # a rank holding one of n pieces: its balancing losses count 1/n (the sum of n)

    def __init__(self, d_model: int, hidden: int, cfg: MoEConfig = MoEConfig(), groups: int = 1):
        super().__init__()
        self.cfg, self.groups = cfg, groups
        self.router = nn.Linear(d_model, cfg.experts, bias=False)
        self.experts = nn.ModuleList(Expert(d_model, hidden) for _ in range(cfg.experts))
        self.last: dict = {}
        self.extra_loss = torch.zeros(())

    def token_groups(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Lesson 13: the token numbers (rows of ``x`` flattened to tokens) of each group routed on its own:
        ``groups`` equal runs of lines, as that many ranks would each route their own; and, with
        ``line_pieces`` (each a list of positions in the line), each run cut by piece of the line, as ranks
        that each hold a piece of every line would (issue 36: experts with context parallelism)."""
        lines = x.reshape(-1, x.shape[-2], x.shape[-1]) if x.dim() > 2 else x[:, None]
        n, t = lines.shape[0], lines.shape[1]
        if n % self.groups:
            raise ValueError(f"{n * t} tokens ({n} lines) do not cut into {self.groups} equal groups")
        numbers = torch.arange(n * t, device=x.device).view(n, t)
        pieces = self.line_pieces if self.line_pieces is not None else [torch.arange(t)]
        return [run[:, where.to(x.device)].reshape(-1) for run in numbers.chunk(self.groups) for where in pieces]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out, asked, kept, losses, choice = torch.zeros_like(flat), 0, 0, [], []
        groups = self.token_groups(x)
        for numbers in groups:
            tokens = flat[numbers]
            logits = self.router(tokens)
            routing = route(logits, self.cfg)
            out = out.index_copy(0, numbers, self.combine(tokens, routing))
            choice.append(routing.expert[:, 0])
            asked = asked + torch.bincount(routing.expert.reshape(-1), minlength=self.cfg.experts)
            kept = kept + torch.bincount(routing.expert[routing.kept], minlength=self.cfg.experts)
            losses.append(self.cfg.aux_weight * aux_loss(routing, self.cfg.experts)
                          + self.cfg.z_weight * z_loss(logits))
        self.extra_loss = torch.stack(losses).mean() / self.pieces_per_line
        self.last = {"asked": asked.tolist(), "kept": kept.tolist(), "dropped": int((asked - kept).sum()),
                     "choice": torch.cat(choice)[torch.argsort(torch.cat(groups))]}
        return out.view_as(x)

    def combine(self, tokens: torch.Tensor, routing: Routing) -> torch.Tensor:
        """Each expert's kept tokens through that expert, weighted by their gates and added up per token.
        An expert given no token still runs (on none): its gradient is zero, not missing, as on the ranks."""
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            token, choice = torch.nonzero((routing.expert == e) & routing.kept, as_tuple=True)
            # (.to: under lesson 14's autocast an expert answers in 16 bits, the stream is fp32)
            out = out.index_add(0, token, (routing.gate[token, choice, None] * expert(tokens[token])).to(out.dtype))
        return out


def add_experts(model, cfg: MoEConfig, seed: int, groups: int = 1):
    """Lesson 13: every block's MLP of the line reader ``model`` replaced by ``cfg.experts`` experts of the
    MLP's size and a router, made from ``seed`` (the same on every rank, as the dense parameters are)."""
    for i, block in enumerate(model.blocks):
        torch.manual_seed(seed * 1_000 + 17 + i)
        block.mlp = MoE(model.cfg.d_model, model.cfg.mlp_ratio * model.cfg.d_model, cfg, groups)
    return model
