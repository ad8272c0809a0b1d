"""StepBatch: one row per segment (turn), the unit every method and the loss work on.

A *segment* is what the policy emits between two environment interactions. Rows of one rollout share a
``traj_id``; rollouts of one task share a ``group_id``. Token columns are right-padded to the same
response length and carry a ``response_mask``; prompts are left-padded with a ``prompt_mask``.

Columns are declared once in :data:`COLUMNS`; a method lists the ones it needs in ``Method.requires`` and
:meth:`StepBatch.require` fails at start-up with the missing names (not with a shape error mid-run).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
from torch import Tensor

# Where a column lives: "token" = (rows, response_len), "prompt" = (rows, prompt_len), "row" = (rows,),
# "list" = a python list with one entry per row.
TOKEN, PROMPT, ROW, LIST = "token", "prompt", "row", "list"

# next_obs_hash of a won rollout's last segment: the goal node of a state graph, as GraphGPO's rollout loop writes
# "success" there. Negative, so it never equals a hash (observation_hash keeps 63 bits: always ≥ 0).
SUCCESS_STATE = -1


@dataclass(frozen=True)
class Column:
    kind: str
    dtype: torch.dtype | None
    doc: str


COLUMNS: dict[str, Column] = {
    # tokens
    "prompt_ids": Column(PROMPT, torch.long, "prompt token ids, left-padded"),
    "prompt_mask": Column(PROMPT, torch.bool, "True on real prompt tokens"),
    "response_ids": Column(TOKEN, torch.long, "response token ids, right-padded"),
    "response_mask": Column(TOKEN, torch.bool, "True on real response tokens"),
    # log-probs of the sampled response tokens
    "old_logp": Column(TOKEN, torch.float32, "log pi_old(y_t|h_t): the policy that collected the batch"),
    "ref_logp": Column(TOKEN, torch.float32, "log pi_ref(y_t|h_t): the frozen reference policy (KL)"),
    "rollout_logp": Column(TOKEN, torch.float32, "log-probs reported by the generation backend"),
    "teacher_logp": Column(TOKEN, torch.float32, "q_t = log pi(y_t|h_t+) under the privileged context"),
    "teacher_available": Column(ROW, torch.bool, "True where a privileged context existed for this row"),
    # ids
    "group_id": Column(ROW, torch.long, "task group (G rollouts of one task)"),
    "traj_id": Column(ROW, torch.long, "rollout id, unique in the batch"),
    "step_idx": Column(ROW, torch.long, "segment index k inside its rollout (0-based)"),
    "n_steps": Column(ROW, torch.long, "number of segments K_i of the rollout"),
    # outcomes
    "episode_return": Column(ROW, torch.float32, "R_i: the rollout's total env reward, on every row"),
    "success": Column(ROW, torch.bool, "the rollout won"),
    "step_reward": Column(ROW, torch.float32, "r_t: env reward of this step"),
    "action_valid": Column(ROW, torch.bool, "the segment's action parsed (and was admissible, if required)"),
    "obs_hash": Column(ROW, torch.long, "hash of the observation text this segment answered (GiGPO)"),
    "next_obs_hash": Column(ROW, torch.long, "hash of the observation that followed this segment's action, as "
                            "obs_hash; SUCCESS_STATE on a won rollout's last segment (GraphGPO's state graph)"),
    # task
    "task_id": Column(LIST, None, "task id (str)"),
    "task_type": Column(LIST, None, "task type (str)"),
    # ground truth, where the benchmark labels its turns (harness/engine/credit.py)
    "credit_label": Column(LIST, None, "the turn's label: correct | detour | fatal | invalid (envs.base)"),
}


class MissingColumnError(KeyError):
    def __init__(self, missing: Sequence[str], who: str):
        self.missing = list(missing)
        msg = (
            f"{who} needs batch column(s) {self.missing}, which this batch lacks. "
            f"Columns present come from the rollout ({', '.join(sorted(COLUMNS))}); "
            "a method that needs 'teacher_logp' must declare a teacher context so the engine scores it."
        )
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return self.args[0]


class StepBatch:
    """A dict of named columns with shape checks; attribute access raises MissingColumnError."""

    def __init__(self, **columns):
        unknown = sorted(set(columns) - set(COLUMNS))
        if unknown:
            raise KeyError(f"unknown StepBatch column(s) {unknown}; known: {sorted(COLUMNS)}")
        self._cols: dict[str, Tensor | list] = {}
        for name, value in columns.items():
            if value is not None:
                self._cols[name] = _coerce(name, value)
        self._check_shapes()

    # -- access -------------------------------------------------------------------------------------
    def __getattr__(self, name: str):
        cols = self.__dict__.get("_cols", {})
        if name in cols:
            return cols[name]
        if name in COLUMNS:
            raise MissingColumnError([name], "this computation")
        raise AttributeError(name)

    def __contains__(self, name: str) -> bool:
        return name in self._cols

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    @property
    def num_rows(self) -> int:
        return len(next(iter(self._cols.values())))

    def __len__(self) -> int:
        return self.num_rows

    def require(self, names: Iterable[str], who: str = "this method") -> None:
        missing = [n for n in names if n not in self._cols]
        if missing:
            raise MissingColumnError(missing, who)

    # -- transforms ---------------------------------------------------------------------------------
    def with_columns(self, **columns) -> "StepBatch":
        merged = dict(self._cols)
        merged.update(columns)
        return StepBatch(**merged)

    def select(self, index: Tensor | Sequence[int]) -> "StepBatch":
        """Rows at ``index`` (mini-batches); list columns are indexed too."""
        index = torch.as_tensor(index, dtype=torch.long)
        out = {}
        for name, value in self._cols.items():
            out[name] = [value[i] for i in index.tolist()] if isinstance(value, list) else value[index]
        return StepBatch(**out)

    def to(self, device) -> "StepBatch":
        return StepBatch(**{k: v.to(device) if isinstance(v, Tensor) else v for k, v in self._cols.items()})

    def state_dict(self) -> dict:
        return dict(self._cols)

    # -- checks -------------------------------------------------------------------------------------
    def _check_shapes(self) -> None:
        if not self._cols:
            return
        rows = {n: len(v) for n, v in self._cols.items()}
        if len(set(rows.values())) != 1:
            raise ValueError(f"StepBatch columns disagree on the number of rows: {rows}")
        widths: dict[str, dict[str, int]] = {TOKEN: {}, PROMPT: {}}
        for name, value in self._cols.items():
            kind = COLUMNS[name].kind
            if kind in (TOKEN, PROMPT):
                if value.dim() != 2:
                    raise ValueError(f"column {name!r} must be 2-D (rows, {kind}_len); got {tuple(value.shape)}")
                widths[kind][name] = value.shape[1]
            elif kind == ROW and value.dim() != 1:
                raise ValueError(f"column {name!r} must be 1-D (rows,); got {tuple(value.shape)}")
        for kind, w in widths.items():
            if len(set(w.values())) > 1:
                raise ValueError(f"{kind} columns disagree on their length: {w}")


def _coerce(name: str, value):
    spec = COLUMNS[name]
    if spec.kind == LIST:
        return list(value)
    return torch.as_tensor(value, dtype=spec.dtype)
