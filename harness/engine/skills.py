"""The ``skills`` teacher context's text for a task (RLSD, SDAR, GRPO+OPSD): the benchmark's own ``skills`` table
(``envs/<name>/skills.py``), so a new benchmark brings its hints with it and this module names none.

The hints are written for this project: one short procedural hint per task type, the kind of knowledge a skill
library distils from successful episodes. They never contain task-specific answers (object locations, product
ids), so the teacher is better informed than the student without being handed the solution.
"""
from __future__ import annotations


def skill_for(benchmark: str, task_type: str) -> str:
    from envs.base import BENCHMARKS

    table = BENCHMARKS.get(benchmark).skills
    return table.get(task_type) or table.get("default", "")
