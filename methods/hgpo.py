"""HGPO: hierarchy-of-groups step advantages over shared observation histories (ICLR 2026, arXiv 2602.22817;
methods/FORMULAS.md#hgpo).

The authors' code is verl-agent's ``recipe/hgpo/core_hgpo.py`` (public snapshot ``xlan156/verl-agent``):
``compute_step_discounted_returns`` and ``hgpo_advantage_estimate``; the settings are those of
``recipe/hgpo/run_qwen2.5_1.5b_alfworld_train.sh``. tests/test_methods_hgpo.py holds a line-by-line transcription
and compares.

The history of a row is the observations its rollout answered at its last k steps. As in the published code it is
read from the rollout's own rows (``obs_hash`` at the preceding ``step_idx``), so no extra batch column is needed:
every turn of a rollout is a row of the batch (harness/engine/rollout.py, ``to_step_batch``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.ranges import Checked
from harness.core.registry import Method, register
from methods._segments import dense_ids, group_mean_std, has_tokens, rollout_table, step_rank, to_tokens
from methods.gigpo import discounted_returns
from methods.grpo import EPISODE_COLUMNS, advantage_diagnostics, episode_advantage


@dataclass
class HgpoConfig(Checked):
    section = "method"

    history_length: int = field(default=2, metadata={
        "help": "K: groups share the current observation and up to K earlier ones (run script: 2; 4 also run)",
        "range": ">= 0"})
    mode: Literal["mean_std_norm", "mean_norm"] = field(default="mean_std_norm", metadata={
        "help": "mean_std_norm: (R − mean)/(population std + ε) in each group (run script); mean_norm: R − mean"})
    length_weight_alpha: float = field(default=1.0, metadata={
        "help": "α: a group whose key holds k observations weighs (k + 1)^α; 0 = uniform", "range": ">= 0"})
    base_group: bool = field(default=False, metadata={
        "help": "add the episode (GRPO) advantage as one more group of weight 1 (run script: false)"})
    gamma: float = field(default=0.95, metadata={"help": "γ of the step return (run script)", "range": "[0, 1]"})
    invalid_action_penalty: float = field(default=0.1, metadata={
        "help": "p: subtracted from the step return (and the episode score) of a row whose action was invalid",
        "range": ">= 0"})
    epsilon: float = field(default=1e-6, metadata={"help": "ε of the std and of the weight sum", "range": "> 0"})


def step_returns(batch: StepBatch, gamma: float, penalty: float, traj: Tensor, rank: Tensor) -> Tensor:
    """R_t = Σ_{l ≥ t} γ^{l−t}·r_l − p·(1 − valid), over the rollout's rows in step order (float64)."""
    returns = discounted_returns(batch.step_reward, traj, rank, gamma)
    return returns - penalty * (~batch.action_valid).double()


def history_groups(obs_hash: Tensor, group_id: Tensor, traj: Tensor, rank: Tensor, n_traj: int, depth: int):
    """For k = 1..depth: (rows with at least k observations so far, dense id of (task group, last k observations)).

    Each k refines k − 1 by one more observation, so its id is built from the previous id and that observation.
    """
    table = rollout_table(obs_hash.long(), traj, rank, n_traj)
    rows = torch.arange(rank.numel(), device=rank.device)
    key, n = dense_ids(group_id, obs_hash)
    yield rows, key, n
    for k in range(2, depth + 1):
        keep = rank[rows] >= k - 1
        rows, key = rows[keep], key[keep]
        earlier, m = dense_ids(table[traj[rows], rank[rows] - (k - 1)])
        key, n = dense_ids(key * m + earlier)
        yield rows, key, n


@register("hgpo")
class Hgpo(Method):
    """A_t = Σ_k w_k·a_k / (Σ_k w_k + ε) over the groups of rows (same task group) that share the row's last k
    observations, k = 1..K+1, with a_k the row's normalised step return in that group, w_k = (k + 1)^α, and only
    groups of ≥ 2 rows with a_k ≠ 0 counted (methods/FORMULAS.md#hgpo)."""

    Config = HgpoConfig
    requires = EPISODE_COLUMNS + ("step_reward", "obs_hash")
    display_name = "HGPO"
    display_order = 25
    keeps_sign = False  # not a reweighting of GRPO: the step-group advantages replace the episode advantage
    min_group_size = 2

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        traj, n_traj, rank = step_rank(batch.traj_id, batch.step_idx)
        returns = step_returns(batch, c.gamma, c.invalid_action_penalty, traj, rank)
        numerator = torch.zeros_like(returns)
        weight_sum = torch.zeros_like(returns)
        diagnostics: dict[str, float] = {}
        if c.base_group:
            base = episode_advantage(batch, c.invalid_action_penalty, True, c.mode == "mean_std_norm", c.epsilon)
            base = torch.where(has_tokens(batch.response_mask), base, 0.0)  # the token mean of an empty row
            numerator += base
            weight_sum += (base != 0).double()
        groups = history_groups(batch.obs_hash, batch.group_id, traj, rank, n_traj, c.history_length + 1)
        for k, (rows, index, n) in enumerate(groups, start=1):
            mean, std, count = group_mean_std(returns[rows], index, n, unbiased=False)
            centred = returns[rows] - mean[index]
            adv = centred / (std[index] + c.epsilon) if c.mode == "mean_std_norm" else centred
            counted = (count[index] > 1) & (adv != 0)
            weight = float(k + 1) ** c.length_weight_alpha
            numerator[rows] += torch.where(counted, weight * adv, 0.0)
            weight_sum[rows] += weight * counted.double()
            diagnostics[f"group_size_mean_k{k}"] = float(count.mean()) if n else 0.0  # over groups, as GiGPO's
            diagnostics[f"counted_row_frac_k{k}"] = float(counted.double().sum()) / max(returns.numel(), 1)
        rows_adv = numerator / (weight_sum + c.epsilon)
        diagnostics.update(advantage_diagnostics(rows_adv, batch))
        diagnostics["no_group_row_frac"] = float((weight_sum == 0).double().mean())
        diagnostics["step_return_mean"] = float(returns.mean()) if returns.numel() else 0.0
        return to_tokens(rows_adv, batch.response_mask), diagnostics
