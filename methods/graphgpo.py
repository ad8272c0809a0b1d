"""GraphGPO: GiGPO's step groups scored by the next state's distance to success in each task group's state graph
(ICML 2026, arXiv 2605.26684; methods/FORMULAS.md#graphgpo).

The authors' code is verl-agent's ``recipe/GraphGPO/core_graph.py`` (langfengQ/verl-agent PR #256, commit 234a913;
fetchable fork ``zzj1111/alfworldauto``): ``ComplexGraph.from_data`` (one graph per task group, an edge per step row
from ``anchor_obs`` to ``next_obs``), ``all_to_target_shortest_paths`` (distance to the ``success`` node; an
unreachable node gets the group's longest distance + 1), ``compute_graph_path_returns`` (R_t = 10·γ^d(next)) and
``compute_graphgpo_outcome_advantage`` (GiGPO's ``episode_norm_reward``, ``build_step_group``, ``step_norm_reward``).
The penalty step is ``apply_invalid_action_penalty`` of ``recipe/GraphGPO/graphgpo_ray_trainer.py``; the defaults are
``recipe/GraphGPO/run_qwen2.5_1.5b_alfworld_train.sh``. tests/reference_graphgpo.py transcribes them; the tests compare.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.ranges import Checked
from harness.core.registry import Method, register
from methods._segments import normalize_in_groups, to_tokens
from methods._state_graph import UNREACHABLE, StateGraph, goal_distance, premise_diagnostics, source_states, state_graph
from methods.grpo import EPISODE_COLUMNS, advantage_diagnostics, episode_advantage

PATH_REWARD = 10.0  # R_t = 10·γ^d: the constant of compute_graph_path_returns (ALFWorld's win reward)


@dataclass
class GraphgpoConfig(Checked):
    section = "method"

    gamma: float = field(default=0.10, metadata={
        "help": "γ of R_t = 10·γ^d (ALFWorld run script: 0.10; WebShop: 0.20)", "range": "[0, 1]"})
    step_weight: float = field(default=1.0, metadata={"help": "weight of the step-group advantage", "range": ">= 0"})
    episode_weight: float = field(default=1.0, metadata={"help": "weight of the episode advantage", "range": ">= 0"})
    mode: Literal["mean_std_norm", "mean_norm"] = field(default="mean_std_norm", metadata={
        "help": "mean_std_norm: (x − mean)/(std + ε) in both terms (run scripts); mean_norm: x − mean"})
    normalize_distance: bool = field(default=False, metadata={
        "help": "R_t = 10·γ^(d(next) − d(current) + 1) instead of 10·γ^d(next) (run scripts: false)"})
    invalid_action_penalty: float = field(default=0.1, metadata={
        "help": "p: subtracted from the step return and the episode score of a row whose action was invalid",
        "range": ">= 0"})
    epsilon: float = field(default=1e-6, metadata={"help": "ε added to the std", "range": "> 0"})


def success_distances(graph: StateGraph, distance: Tensor) -> Tensor:
    """d per node: edges to its group's success node; an unreachable node gets the group's longest finite
    distance + 1 (``all_to_target_shortest_paths``), so a group without a success has d = 1 everywhere."""
    longest = torch.zeros(int(graph.group.max()) + 1 if graph.n else 0, dtype=torch.long,
                          device=distance.device).scatter_reduce_(0, graph.group, distance.clamp(min=0), reduce="amax")
    return torch.where(distance == UNREACHABLE, longest[graph.group] + 1, distance)


def path_returns(c: GraphgpoConfig, d_src: Tensor, d_dst: Tensor, valid: Tensor) -> Tensor:
    """R_t = 10·γ^d(next) (or 10·γ^(d(next) − d(current) + 1)) − p·(1 − valid), float64."""
    exponent = (d_dst - d_src + 1 if c.normalize_distance else d_dst).double()
    return PATH_REWARD * torch.pow(torch.tensor(c.gamma, dtype=torch.float64), exponent) \
        - c.invalid_action_penalty * (~valid).double()


@register("graphgpo")
class Graphgpo(Method):
    """A = w_S·A^S + w_E·A^E: A^E the episode (GRPO) advantage, A^S GiGPO's step-group normalisation of
    R_t = 10·γ^d(s_{t+1}) − p·(1 − valid), d the fewest edges from the row's next state to ``success`` in its task
    group's graph of observed transitions (GiGPO's Eq. 8 joint advantage with the graph-path return, as
    ``compute_graphgpo_outcome_advantage`` adapts it; methods/FORMULAS.md#graphgpo)."""

    Config = GraphgpoConfig
    requires = EPISODE_COLUMNS + ("obs_hash", "next_obs_hash")
    keeps_sign = False  # the step term is added, so a row's sign can flip
    grpo_limit = {"step_weight": 0.0}  # A = A^E: GRPO's advantage (mean_std_norm, all step rows, ε 1e-6)
    display_name = "GraphGPO"
    display_order = 22
    min_group_size = 2

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        by_std = c.mode == "mean_std_norm"
        graph = state_graph(batch.group_id, batch.obs_hash, batch.next_obs_hash)
        distance = goal_distance(graph)
        d = success_distances(graph, distance)
        returns = path_returns(c, d[graph.src], d[graph.dst], batch.action_valid)
        state, n_states, state_node = source_states(graph.src)
        step_adv = normalize_in_groups(returns, state, n_states, by_std, c.epsilon, "zero")
        episode = episode_advantage(batch, c.invalid_action_penalty, True, by_std, c.epsilon)
        rows = c.step_weight * step_adv + c.episode_weight * episode
        diagnostics = advantage_diagnostics(rows, batch)
        diagnostics.update(premise_diagnostics(state, n_states, distance[state_node] != UNREACHABLE))
        diagnostics.update({
            "episode_adv_abs_mean": float(episode.abs().mean()),
            "step_adv_abs_mean": float(step_adv.abs().mean()),
            "next_distance_mean": float(d[graph.dst].double().mean()),
            "step_return_mean": float(returns.mean()),
        })
        return to_tokens(rows, batch.response_mask), diagnostics
