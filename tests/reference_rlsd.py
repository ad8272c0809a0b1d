"""TEST-ONLY transcription of the SDAR repository's RLSD token transform, to time and check methods/rlsd.py against.

Never imported by the harness. From ``jasonchen505/SDAR`` @ 92f1b0f, ``verl/trainer/ppo/rlsd_utils.py``,
``compute_rlsd_token_advantage``, line for line (it is already vectorised torch); and ``rlsd_step_as_trained``: that
function followed by the lines of ``verl/trainer/ppo/rlsd_ray_trainer.py`` (``RLSDRayTrainer.fit``, in the same
"adv" timer) that log the teacher-student gap, the diagnostics methods/rlsd.py computes in its own call.
"""
from __future__ import annotations

import torch


def compute_rlsd_token_advantage(seq_advantages, student_log_probs, teacher_log_probs, response_mask,
                                 rlsd_lambda=0.5, rlsd_clip_eps=0.2):
    with torch.no_grad():
        first_valid = response_mask.int().argmax(dim=-1)
        batch_indices = torch.arange(seq_advantages.size(0), device=seq_advantages.device)
        A_seq = seq_advantages[batch_indices, first_valid]
        delta_t = teacher_log_probs - student_log_probs
        sign_A = torch.sign(A_seq).unsqueeze(-1)
        w_t = torch.exp(sign_A * delta_t)
        w_t = torch.clamp(w_t, 1.0 - rlsd_clip_eps, 1.0 + rlsd_clip_eps)
        A_seq_expanded = A_seq.unsqueeze(-1)
        token_advantages = A_seq_expanded * ((1.0 - rlsd_lambda) + rlsd_lambda * w_t)
        token_advantages = token_advantages * response_mask
    return token_advantages


def masked_mean(values, mask):
    """verl's ``masked_mean`` over all elements, in its simplest form (later verl versions add a torch.where)."""
    return (values * mask).sum() / (mask.sum() + 1e-8)


def rlsd_step_as_trained(seq_advantages, student_log_probs, teacher_log_probs, response_mask, rlsd_lambda=0.5,
                         rlsd_clip_eps=0.2):
    token_advantages = compute_rlsd_token_advantage(seq_advantages, student_log_probs, teacher_log_probs,
                                                    response_mask, rlsd_lambda, rlsd_clip_eps)
    metrics = {}
    delta_t = (teacher_log_probs - student_log_probs) * response_mask
    metrics["rlsd/teacher_student_gap_mean"] = masked_mean(delta_t, response_mask).item()
    metrics["rlsd/teacher_student_gap_std"] = masked_mean(delta_t ** 2, response_mask).sqrt().item()
    return token_advantages, metrics
