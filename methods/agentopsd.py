"""AgentOPSD: a bounded turn-level multiplier on the GRPO advantage, driven by a belief recursion over the
teacher–student gap (methods/FORMULAS.md#agentopsd).

The authors' code is ``ZethWang/AgentOPSD`` @ b602d89, ``verl/trainer/ppo/opsd_utils.py``:
``compute_group_mean_v0`` (the prior V_0) and ``compute_opsd_turn_advantage`` on its ``belief_mult`` path, the one
``examples/agentopsd_trainer/run_alfworld_7b.sh`` runs (granularity turn, belief_mult, signed, mult_lambda 0.5).
tests/test_methods_agentopsd.py holds a line-by-line transcription of both functions and compares.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from harness.core.batch import StepBatch
from harness.core.registry import register
from methods._segments import (
    dense_ids,
    has_tokens,
    masked_stats,
    multiplier_diagnostics,
    rollout_table,
    segment_sum,
    share_of_rows,
    step_rank,
    teacher_gap,
    to_tokens,
)
from methods.grpo import GrpoBase, GrpoConfig, advantage_diagnostics, first_step_rows, step_scores
from methods.rlsd import rlsd_lambda

V0_CLAMP = 1e-4  # compute_group_mean_v0 and compute_opsd_turn_advantage clamp V_0 to [1e-4, 1 − 1e-4]


@dataclass
class AgentOpsdConfig(GrpoConfig):
    mult_lambda: float = field(default=0.5, metadata={
        "help": "λ: Ã = A·((1 − λ) + λ·m_k) (run_alfworld_7b.sh: mult_lambda=0.5)", "range": "[0, 1]"})
    mult_band: float = field(default=0.2, metadata={
        "help": "b: m_k is clamped to [1 − b, 1 + b] (trainer default 0.2)", "range": "[0, 1)"})
    signed: bool = field(default=True, metadata={
        "help": "z-score the signed belief increment and steer by sign(A) (paper Eq. 6; run script signed=true); "
                "false: z-score its magnitude (the unsigned variant)"})
    belief_gate: bool = field(default=True, metadata={
        "help": "use the belief increment V_k − V_{k−1} (true, default) or the raw turn gap d_k (false)"})
    mult_signed: bool = field(default=True, metadata={
        "help": "multiply A (true, default) or |A| (false: the ablation that drops the outcome's sign)"})
    center_delta: bool = field(default=False, metadata={
        "help": "subtract each rollout's mean turn gap before the recursion (published option, off by default)"})
    belief_decay_gamma: float = field(default=1.0, metadata={
        "help": "γ_b: c_k = γ_b·c_{k−1} + d_k; 1 = plain cumulative sum (default)", "range": "(0, 1]"})
    warmdown_steps: int | None = field(default=None, metadata={
        "help": "λ decays linearly to 0 at this step (RLSD-style); null keeps λ constant (published -1)",
        "range": ">= 1"})
    v0_source: Literal["group_mean_score", "group_success_rate", "prior"] = field(default="group_mean_score", metadata={
        "help": "V_0: group mean of the scored return, then clamped (published: on ALFWorld's 10·won it is 1e-4 or "
                "1 − 1e-4); group_success_rate: the share of the group's rollouts that won (the corrected reading); "
                "prior: the constant v0_prior"})
    v0_prior: float = field(default=0.5, metadata={"help": "V_0 when v0_source is prior", "range": "(0, 1)"})
    belief_eps: float = field(default=1e-6, metadata={
        "help": "ε: V_k is clamped to [ε, 1 − ε] and ε is added to the z-score's std", "range": "> 0"})


def prior_v0(batch: StepBatch, c: AgentOpsdConfig, traj: Tensor, n_traj: int) -> Tensor:
    """V_0 per rollout (methods/FORMULAS.md#agentopsd), clamped to [1e-4, 1 − 1e-4], float64.

    ``group_mean_score`` follows ``compute_group_mean_v0``: the mean over a group's rollouts of one row's score
    R − p·(1 − valid); the published code takes each rollout's first row in batch order, here its earliest step
    (the same row in verl-agent's trajectory-major layout; on ALFWorld the clamp makes the choice moot).
    """
    if c.v0_source == "prior":
        v0 = torch.full((n_traj,), c.v0_prior, dtype=torch.float64, device=traj.device)
    else:
        first = first_step_rows(batch.traj_id, batch.step_idx)  # one row per rollout, ordered by dense id
        if c.v0_source == "group_mean_score":
            values = step_scores(batch, c.invalid_action_penalty)[first]
        else:
            values = batch.success.double()[first]
        group, n_groups = dense_ids(batch.group_id[first])
        count = segment_sum(torch.ones_like(values), group, n_groups)
        v0 = (segment_sum(values, group, n_groups) / count)[group]  # first_step_rows is ordered by dense id
    return v0.clamp(V0_CLAMP, 1.0 - V0_CLAMP)


def discounted_cumsum(table: Tensor, gamma: float) -> Tensor:
    """c_k = γ·c_{k−1} + d_k along dim 1; γ = 1 is the plain cumulative sum (``_discounted_cumsum``)."""
    if gamma >= 1.0:
        return table.cumsum(dim=1)
    lag = torch.arange(table.shape[1], dtype=table.dtype, device=table.device)
    exponent = lag[None, :] - lag[:, None]  # k − j
    decay = torch.where(exponent >= 0, gamma ** exponent.clamp(min=0), torch.zeros((), dtype=table.dtype))
    return table @ decay


def rollout_zscore(x: Tensor, traj: Tensor, n_traj: int, eps: float) -> Tensor:
    """(x − mean) / (population std + ε) over each rollout's rows; a one-turn rollout gets 0."""
    count = segment_sum(torch.ones_like(x), traj, n_traj)
    mean = segment_sum(x, traj, n_traj) / count
    centred = x - mean[traj]
    std = (segment_sum(centred.square(), traj, n_traj) / count).sqrt()
    return centred / (std[traj] + eps)


@register("agentopsd")
class AgentOpsd(GrpoBase):
    """Ã_k = A_k·((1 − λ) + λ·m_k), m_k = clip(1 + b·sign(A_k)·z_k, 1 − b, 1 + b), z_k the within-rollout
    z-score of the belief increment V_k − V_{k−1}, logit V_k = logit V_0 + Σ_{j≤k} d_j, d_j = Σ_t δ_t over turn j
    (methods/FORMULAS.md#agentopsd)."""

    Config = AgentOpsdConfig
    requires = GrpoBase.requires + ("teacher_logp", "old_logp", "success")
    teacher = "skills"
    display_name = "AgentOPSD"
    display_order = 65
    grpo_limit = {"mult_lambda": 0.0}
    stress_options = {"mult_lambda": 1.0, "mult_band": 0.9}

    def multiplier(self, batch: StepBatch, adv: Tensor) -> tuple[Tensor, Tensor, dict[str, float]]:
        """(m_k per row, the belief V_k per row, diagnostics) of the turn-level belief recursion."""
        c = self.config
        traj, n_traj, rank = step_rank(batch.traj_id, batch.step_idx)
        # float64 from the turn sums on: a saturated belief (V_0 = 1 − 1e-4) moves by ~1e-4·d, below float32's
        # resolution. The token work stays float32 (memory-bound; a float64 copy doubled the method's time)
        gap = teacher_gap(batch).sum(dim=1).double()
        if c.center_delta:
            count = segment_sum(torch.ones_like(gap), traj, n_traj)
            gap = torch.where(count[traj] > 1, gap - (segment_sum(gap, traj, n_traj) / count)[traj], gap)
        v0 = prior_v0(batch, c, traj, n_traj)
        evidence = discounted_cumsum(rollout_table(gap, traj, rank, n_traj), c.belief_decay_gamma)
        logit = torch.log(v0 / (1.0 - v0))
        belief_table = torch.sigmoid(logit[:, None] + evidence).clamp(c.belief_eps, 1.0 - c.belief_eps)
        belief = belief_table[traj, rank]
        previous = torch.where(rank > 0, belief_table[traj, (rank - 1).clamp(min=0)], v0[traj])
        increment = belief - previous if c.belief_gate else gap
        b = c.mult_band
        if c.signed:
            z = rollout_zscore(increment, traj, n_traj, c.belief_eps)
            m = (1.0 + b * torch.sign(adv) * z).clamp(1.0 - b, 1.0 + b)
        else:
            m = (1.0 + b * rollout_zscore(increment.abs(), traj, n_traj, c.belief_eps)).clamp(1.0 - b, 1.0 + b)
        diagnostics = {
            "v0_mean": float(v0.mean()) if n_traj else 0.0,
            "v0_clamped_frac": float(((v0 <= V0_CLAMP) | (v0 >= 1.0 - V0_CLAMP)).double().mean()) if n_traj else 0.0,
            "belief_saturated_frac": float(((belief <= c.belief_eps) | (belief >= 1 - c.belief_eps)).double().mean()),
        }
        diagnostics.update(masked_stats(gap, torch.ones_like(gap, dtype=torch.bool), "turn_gap"))
        return m, belief, diagnostics

    def advantages(self, batch: StepBatch, step: int = 0) -> tuple[Tensor, dict[str, float]]:
        self.check_batch(batch)
        c = self.config
        adv = self.episode_advantage(batch)
        lam = rlsd_lambda(c.mult_lambda, c.warmdown_steps, step)
        m, _, belief_diag = self.multiplier(batch, adv)
        multiplier = (1.0 - lam) + lam * m
        direction = adv if c.mult_signed else adv.abs()
        rows = direction * multiplier
        acting = (adv != 0) & has_tokens(batch.response_mask)
        diagnostics = advantage_diagnostics(adv, batch)
        diagnostics.update(multiplier_diagnostics(multiplier, acting, batch.response_mask))
        diagnostics.update(belief_diag)
        band = c.mult_band  # m's band: the share of the reweighted rows whose m sits on its edge
        clipped = (m <= 1.0 - band) | (m >= 1.0 + band)
        diagnostics["band_clip_frac"] = share_of_rows(clipped, acting) if band > 0 else 0.0
        diagnostics["lambda"] = float(lam)
        return to_tokens(rows, batch.response_mask), diagnostics
