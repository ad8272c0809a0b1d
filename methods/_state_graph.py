"""State graphs over a batch's step rows, shared by GraphGPO and G2PO (methods/FORMULAS.md#graphgpo, #g2po).

A node is a state of one task group: (group_id, state hash). A step row is an edge from the state it answered
(``obs_hash``) to the state it led to; the goal node is ``SUCCESS_STATE`` (``harness.core.batch``). Task groups never
share a node, so one breadth-first search from every group's goal at once gives each node its distance to its own
group's goal: a handful of passes over the edges (one per distance level), not a search per group.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from harness.core.batch import SUCCESS_STATE
from methods._segments import dense_ids, segment_sum

UNREACHABLE = -1


class StateGraph(NamedTuple):
    src: Tensor  # (rows,) node of the state the row answered
    dst: Tensor  # (rows,) node of the state it led to
    n: int  # number of nodes
    goal: Tensor  # (n,) the node is its task group's SUCCESS_STATE
    group: Tensor  # (n,) dense task group of the node


def state_graph(group_id: Tensor, source: Tensor, target: Tensor) -> StateGraph:
    """The task groups' graphs: nodes are dense ids of (group_id, hash) over sources and targets together, so a
    row's target is the same node as another row's source exactly when both name one state of one task group."""
    rows = group_id.numel()
    group, _ = dense_ids(group_id)
    hashes = torch.cat([source, target]).long()
    node, n = dense_ids(torch.cat([group, group]), hashes)
    goal = torch.zeros(n, dtype=torch.bool, device=node.device)
    goal[node[rows:][target == SUCCESS_STATE]] = True
    node_group = torch.zeros(n, dtype=torch.long, device=node.device).scatter_(0, node, torch.cat([group, group]))
    return StateGraph(node[:rows], node[rows:], n, goal, node_group)


def goal_distance(graph: StateGraph) -> Tensor:
    """Fewest edges from each node to its group's goal node, following edges forwards; UNREACHABLE where none.

    Breadth-first from the goals over the reversed edges (GraphGPO's Dijkstra on unit weights): level k holds
    the sources of edges into level k − 1 not reached before. One pass over the edges per level.
    """
    src, dst, n, goal, _ = graph
    distance = torch.full((n,), UNREACHABLE, dtype=torch.long, device=src.device)
    distance[goal] = 0
    frontier, level = goal, 0
    while bool(frontier.any()):
        level += 1
        reached = torch.zeros(n, dtype=torch.bool, device=src.device)
        reached[src[frontier[dst]]] = True
        frontier = reached & (distance == UNREACHABLE)
        distance[frontier] = level
    return distance


def premise_diagnostics(state: Tensor, n_states: int, reaches_goal: Tensor) -> dict[str, float]:
    """What both methods assume: states recur (a state groups several rows: of other rollouts, or a rollout
    that came back to it, as the authors' step groups count both) and some states reach the goal (so distances or
    values differ). ``state``: dense (task group, obs_hash) id per row;
    ``reaches_goal``: per state (rows' source nodes), whether a path to its group's goal exists."""
    sizes = segment_sum(torch.ones(state.numel(), dtype=torch.float64, device=state.device), state, n_states)
    return {
        "recurring_state_row_frac": float((sizes[state] >= 2).double().mean()) if state.numel() else 0.0,
        "success_reachable_state_frac": float(reaches_goal.double().mean()) if n_states else 0.0,
        "state_group_size_mean": float(sizes.mean()) if n_states else 0.0,
    }


def source_states(src: Tensor) -> tuple[Tensor, int, Tensor]:
    """(dense id per row among the rows' source nodes, their number, the node of each): the step rows' state
    groups, (group_id, obs_hash) as GiGPO's, with the node that locates each in the graph."""
    state, n = dense_ids(src)
    node = torch.zeros(n, dtype=torch.long, device=src.device).scatter_(0, state, src)
    return state, n, node
