"""GiGPO: episode advantage plus a step advantage over anchor-state groups (arXiv 2505.10978, verl-agent;
methods/FORMULAS.md#gigpo)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.ranges import Checked
from harness.core.registry import Method, register
from methods._segments import dense_ids, normalize_in_groups, segment_sum, to_tokens
from methods.grpo import EPISODE_COLUMNS, advantage_diagnostics, episode_advantage


@dataclass
class GigpoConfig(Checked):
    section = "method"

    mode: Literal["mean_norm", "mean_std_norm"] = field(default="mean_norm", metadata={
        "help": "mean_norm: centre only (verl-agent's default and run scripts); mean_std_norm: also divide by the std"})
    gamma: float = field(default=0.95, metadata={"help": "γ of the step return", "range": "[0, 1]"})
    omega: float = field(default=1.0, metadata={"help": "ω: weight of the step advantage", "range": ">= 0"})
    invalid_action_penalty: float = field(default=0.1, metadata={
        "help": "p: subtracted from a step row's episode score per invalid action", "range": ">= 0"})
    penalize_step_return: bool = field(default=True, metadata={
        "help": "also subtract p from the row's step return (verl-agent)"})
    cross_steps: bool = field(default=True, metadata={
        "help": "episode statistics over all step rows of the group (verl-agent)"})
    epsilon: float = field(default=1e-6, metadata={"help": "ε added to the std", "range": "> 0"})


def discounted_returns(reward: Tensor, traj_id: Tensor, step_idx: Tensor, gamma: float) -> Tensor:
    """R_t = Σ_{l ≥ t} γ^{l−t} r_l inside each rollout (GiGPO Eq. 5), float64.

    Rewards go into a (rollouts, max_steps) table indexed by ``step_idx``; one product with the upper
    triangular matrix D[l, t] = γ^{l−t} (l ≥ t) gives every return at once.
    """
    traj, n = dense_ids(traj_id)
    steps = step_idx.long()
    width = int(steps.max()) + 1 if steps.numel() else 0
    if steps.numel() and int(steps.min()) < 0:
        raise ValueError("step_idx must be ≥ 0")
    table = torch.zeros(n, width, dtype=torch.float64, device=reward.device)
    ones = torch.ones(traj.numel(), dtype=torch.float64, device=reward.device)
    occupancy = torch.zeros_like(table).index_put_((traj, steps), ones, accumulate=True)
    if occupancy.numel() and float(occupancy.max()) > 1:
        raise ValueError("two rows of one rollout share a step_idx; GiGPO needs (traj_id, step_idx) unique")
    table.index_put_((traj, steps), reward.double())
    lag = torch.arange(width, device=reward.device, dtype=torch.float64)
    exponent = lag[:, None] - lag[None, :]  # l − t
    discount = torch.where(exponent >= 0, gamma ** exponent.clamp(min=0), torch.zeros((), dtype=torch.float64))
    return (table @ discount)[traj, steps]


@register("gigpo")
class Gigpo(Method):
    min_group_size = 2  # episode and step groups compare rollouts of the same task
    """A = A^E + ω·A^S; A^S normalises the step return R_t over rows of one task group that answered the same
    observation (``obs_hash``); a singleton step group gets A^S = 0. ``mode`` applies to both terms."""

    Config = GigpoConfig
    requires = EPISODE_COLUMNS + ("step_reward", "obs_hash")
    keeps_sign = False  # the step term is added, so a row's sign can flip
    grpo_limit = {"omega": 0.0, "mode": "mean_std_norm"}  # no step term; GRPO divides by the std
    display_name = "GiGPO"
    display_order = 20

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        by_std = c.mode == "mean_std_norm"
        episode = episode_advantage(batch, c.invalid_action_penalty, c.cross_steps, by_std, c.epsilon)
        returns = discounted_returns(batch.step_reward, batch.traj_id, batch.step_idx, c.gamma)
        if c.penalize_step_return:
            returns = returns - c.invalid_action_penalty * (~batch.action_valid).double()
        step_group, n = dense_ids(batch.group_id, batch.obs_hash)
        step_adv = normalize_in_groups(returns, step_group, n, by_std, c.epsilon, "zero")
        rows = episode + c.omega * step_adv
        diagnostics = advantage_diagnostics(rows, batch)
        sizes = segment_sum(torch.ones_like(returns), step_group, n)
        diagnostics.update(
            {
                "episode_adv_abs_mean": float(episode.abs().mean()),
                "step_adv_abs_mean": float(step_adv.abs().mean()),
                "step_group_size_mean": float(sizes.mean()) if n else 0.0,
                "singleton_step_row_frac": float((sizes[step_group] == 1).double().mean()),
            }
        )
        return to_tokens(rows, batch.response_mask), diagnostics
