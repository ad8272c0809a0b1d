"""G2PO: GiGPO's state groups turned into a graph of state values; a step is credited with the value of the state
it leads to, within its state group and as a gain over its own state (arXiv 2606.22995; methods/FORMULAS.md#g2po).

The authors' code is ``Nala-YN/G2PO`` @ 55d811a, ``g2po/core_g2po.py``: ``compute_group_aggregation_values`` (state
values V and the next-state links), ``compute_step_level_advantage`` (the two step terms) and
``compute_g2po_outcome_advantage`` (episode term + step terms); the penalty step is ``apply_invalid_action_penalty``
of ``verl/trainer/ppo/ray_trainer.py``, the defaults ``examples/g2po_trainer/run_alfworld.sh``.
tests/reference_g2po.py transcribes them; the tests compare.

The next state of a row is read from its rollout's next row (``obs_hash`` at the next ``step_idx``), as the published
code does; after the last row it is a terminal: success (``success``) or failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from harness.core.batch import SUCCESS_STATE, StepBatch
from harness.core.ranges import Checked
from harness.core.registry import Method, register
from methods._segments import dense_ids, normalize_in_groups, rollout_table, segment_sum, step_rank, to_tokens
from methods._state_graph import UNREACHABLE, goal_distance, premise_diagnostics, source_states, state_graph
from methods.grpo import EPISODE_COLUMNS, advantage_diagnostics, episode_advantage

FAILURE_STATE = -2  # the terminal after a lost rollout's last row (the authors' next_group_idx −2)


@dataclass
class G2poConfig(Checked):
    section = "method"

    mode: Literal["mean_std_norm", "mean_norm"] = field(default="mean_std_norm", metadata={
        "help": "mean_std_norm: (x − mean)/(std + ε) in all three terms (ALFWorld run script); mean_norm: x − mean "
                "(WebShop run script)"})
    step_weight: float = field(default=1.0, metadata={"help": "weight of the two step terms", "range": ">= 0"})
    value_gamma: float = field(default=0.95, metadata={
        "help": "γ of a row's share γ^(K − t)·R of its state's value (hard-coded in core_g2po.py)", "range": "[0, 1]"})
    step_penalty: float = field(default=0.1, metadata={
        "help": "subtracted from the next-state value of an invalid row in the state-group term (hard-coded)",
        "range": ">= 0"})
    invalid_action_penalty: float = field(default=0.1, metadata={
        "help": "p: subtracted from the episode score of a row whose action was invalid (run script)", "range": ">= 0"})
    epsilon: float = field(default=1e-6, metadata={"help": "ε added to the std", "range": "> 0"})


def state_values(batch: StepBatch, gamma: float, state: Tensor, n_states: int, traj: Tensor, rank: Tensor):
    """V(s) = mean over the rows answering s of γ^(K_i − t)·R_i (t the row's 0-based position in its rollout of K_i
    rows, R_i the episode return), float64; and per row the rollout's length K_i."""
    length = segment_sum(torch.ones_like(rank, dtype=torch.float64), traj, int(traj.max()) + 1 if traj.numel() else 0)
    k = length[traj]
    share = torch.pow(torch.tensor(gamma, dtype=torch.float64), k - rank.double()) * batch.episode_return.double()
    size = segment_sum(torch.ones_like(share), state, n_states)
    return segment_sum(share, state, n_states) / size, k


def next_in_rollout(values: Tensor, traj: Tensor, rank: Tensor, n_traj: int, last: Tensor, after_last) -> Tensor:
    """Each row's value of the rollout's next row; ``after_last`` (scalar or per row) on the last row."""
    table = rollout_table(values, traj, rank, n_traj)
    following = table[traj, (rank + 1).clamp(max=table.shape[1] - 1)]
    return torch.where(last, after_last, following)


@register("g2po")
class G2po(Method):
    """A = A^E + w·(A^next + A^gain): A^E the episode (GRPO) advantage; A^next normalises V(s_{t+1}) − 0.1·(1 − valid)
    over the rows of the row's state group (0 for a one-row group); A^gain normalises V(s_{t+1}) − V(s_t) over the
    rows of the task group. V(s) = mean over s's rows of 0.95^(K − t)·R; the terminal after a won rollout is worth
    its return R (10 on ALFWorld), after a lost one 0 (methods/FORMULAS.md#g2po)."""

    Config = G2poConfig
    requires = EPISODE_COLUMNS + ("obs_hash", "success")
    keeps_sign = False  # the step terms are added, so a row's sign can flip
    grpo_limit = {"step_weight": 0.0}  # A = A^E: GRPO's advantage (mean_std_norm, all step rows, ε 1e-6)
    display_name = "G2PO"
    display_order = 24
    min_group_size = 2

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        by_std = c.mode == "mean_std_norm"
        traj, n_traj, rank = step_rank(batch.traj_id, batch.step_idx)
        state, n_states = dense_ids(batch.group_id, batch.obs_hash)
        value, length = state_values(batch, c.value_gamma, state, n_states, traj, rank)
        last = rank == length.long() - 1
        # the success terminal is worth the won rollout's return: SUCCESS_REWARD = 10 on ALFWorld and WebShop, as
        # published, and the benchmark's own scale elsewhere (Gates: 1); the failure terminal is worth 0
        terminal = torch.where(batch.success, batch.episode_return.double(), 0.0)
        next_value = torch.where(last, terminal, value[next_in_rollout(state, traj, rank, n_traj, last, 0)])
        penalised = next_value - c.step_penalty * (~batch.action_valid).double()
        next_adv = normalize_in_groups(penalised, state, n_states, by_std, c.epsilon, "zero")
        group, n_groups = dense_ids(batch.group_id)
        # a one-row task group: 0 here, NaN in core_g2po.py (torch.std of one value) — methods/FORMULAS.md#g2po
        gain_adv = normalize_in_groups(next_value - value[state], group, n_groups, by_std, c.epsilon, "zero")
        episode = episode_advantage(batch, c.invalid_action_penalty, True, by_std, c.epsilon)
        rows = episode + c.step_weight * (next_adv + gain_adv)
        diagnostics = advantage_diagnostics(rows, batch)
        diagnostics.update(self.premise(batch, traj, rank, n_traj, last))
        diagnostics.update({
            "episode_adv_abs_mean": float(episode.abs().mean()),
            "next_adv_abs_mean": float(next_adv.abs().mean()),
            "gain_adv_abs_mean": float(gain_adv.abs().mean()),
            "state_value_mean": float(value.mean()) if n_states else 0.0,
        })
        return to_tokens(rows, batch.response_mask), diagnostics

    @staticmethod
    def premise(batch: StepBatch, traj: Tensor, rank: Tensor, n_traj: int, last: Tensor) -> dict[str, float]:
        """Recurring states and states with a path to a success terminal, on G2PO's own graph (next row's state,
        then the success or failure terminal)."""
        terminal = torch.where(batch.success, SUCCESS_STATE, FAILURE_STATE)
        following = next_in_rollout(batch.obs_hash.long(), traj, rank, n_traj, last, terminal)
        graph = state_graph(batch.group_id, batch.obs_hash, following)
        state, n_states, state_node = source_states(graph.src)
        return premise_diagnostics(state, n_states, goal_distance(graph)[state_node] != UNREACHABLE)
