"""TEST-ONLY transcription of the SDAR repository's RLSD token transform, to time and check methods/rlsd.py against.

Never imported by the harness. From ``jasonchen505/SDAR`` @ 92f1b0f, ``verl/trainer/ppo/rlsd_utils.py``,
``compute_rlsd_token_advantage``, line for line (it is already vectorised torch).
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
