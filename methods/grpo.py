"""GRPO, multi-turn as in verl-agent: the baseline every other method reweights or extends
(methods/FORMULAS.md#grpo)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.ranges import Checked
from harness.core.registry import Method, register
from methods._segments import dense_ids, normalize_in_groups, segment_sum, to_tokens

EPISODE_COLUMNS = ("episode_return", "action_valid", "group_id", "traj_id", "step_idx", "response_mask")


@dataclass
class GrpoConfig(Checked):
    section = "method"

    invalid_action_penalty: float = field(default=0.1, metadata={
        "help": "p: a step row's score is R_i − p·(1 − action_valid) (verl-agent)", "range": ">= 0"})
    cross_steps: bool = field(default=True, metadata={
        "help": "mean/std over all step rows of the group (verl-agent); false: over one score per rollout"})
    norm_by_std: bool = field(default=True, metadata={"help": "false drops the division by the std (Dr. GRPO reading)"})
    epsilon: float = field(default=1e-6, metadata={"help": "ε added to the std", "range": "> 0"})


def step_scores(batch: StepBatch, penalty: float) -> Tensor:
    """Score of a step row: R_i − coef·(1 − action_valid) (methods/FORMULAS.md#grpo), float64."""
    return batch.episode_return.double() - penalty * (~batch.action_valid).double()


def first_step_rows(traj_id: Tensor, step_idx: Tensor) -> Tensor:
    """One row per rollout: its earliest segment (verl-agent keeps the first row it sees of each rollout)."""
    traj, n = dense_ids(traj_id)
    rows = torch.arange(traj.numel(), device=traj.device)
    key = step_idx.long() * traj.numel() + rows
    first = torch.full((n,), torch.iinfo(torch.long).max, dtype=torch.long, device=traj.device)
    return first.scatter_reduce_(0, traj, key, reduce="amin") % traj.numel()


def episode_advantage(
    batch: StepBatch, penalty: float, cross_steps: bool, norm_by_std: bool, epsilon: float
) -> Tensor:
    """A_i = (score − mean_g) / (std_g + ε), one value per row, float64 (methods/FORMULAS.md#grpo).

    Mean and unbiased std run over all step rows of the task group (``cross_steps``) or over one score per
    rollout; a group with one member gets mean 0, std 1, as in verl's ``compute_grpo_outcome_advantage``.
    """
    scores = step_scores(batch, penalty)
    group, n = dense_ids(batch.group_id)
    stats_from = None if cross_steps else first_step_rows(batch.traj_id, batch.step_idx)
    return normalize_in_groups(scores, group, n, norm_by_std, epsilon, "zero_mean", stats_from)


def advantage_diagnostics(adv_rows: Tensor, batch: StepBatch) -> dict[str, float]:
    group, n = dense_ids(batch.group_id)
    all_zero = segment_sum((adv_rows != 0).double(), group, n) == 0
    return {
        "zero_adv_frac": float((adv_rows == 0).double().mean()),
        "zero_adv_group_frac": float(all_zero.double().mean()),
        "adv_abs_mean": float(adv_rows.abs().mean()),
        "invalid_action_frac": float((~batch.action_valid).double().mean()),
    }


class GrpoBase(Method):
    min_group_size = 2  # advantages are relative to the other rollouts of the task's group
    """Shared plumbing for GRPO and the methods built on its advantage (not registered itself)."""

    Config = GrpoConfig
    requires = EPISODE_COLUMNS

    def episode_advantage(self, batch: StepBatch) -> Tensor:
        c = self.config
        return episode_advantage(batch, c.invalid_action_penalty, c.cross_steps, c.norm_by_std, c.epsilon)

    def grpo_advantages(self, batch: StepBatch) -> tuple[Tensor, Tensor, dict[str, float]]:
        """(token advantages, row advantages, diagnostics) of plain GRPO."""
        self.check_batch(batch)
        rows = self.episode_advantage(batch)
        return to_tokens(rows, batch.response_mask), rows, advantage_diagnostics(rows, batch)


@register("grpo")
class Grpo(GrpoBase):
    """Group-relative outcome advantage broadcast to every token of every segment of a rollout."""

    grpo_limit = {}  # it is GRPO at its defaults
    display_name = "GRPO"
    display_order = 10

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        tokens, _, diagnostics = self.grpo_advantages(batch)
        return tokens, diagnostics
