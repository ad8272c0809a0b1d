"""Synthetic finished run folders in the engine's format (done.json, protocol.json, metrics.csv, eval.csv), for
the workflow and figures tests. Episode outcomes are drawn with a known success probability per run."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

TASK_TYPES = {  # as the engine logs them (ALFWorld's own names), in an order unlike the table's
    "alfworld": ["pick_two_obj_and_place", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
                 "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_and_place_simple"],
    "webshop": ["shop"],
}


def write_run(root: Path, benchmark: str, method: str, seed: int, p_success: float, steps: int = 4,
              eval_every: int = 2, n_tasks: int = 12, outcomes: np.ndarray | None = None) -> Path:
    """Write one finished run; ``outcomes`` (n_tasks,) fixes the final eval successes, else they are drawn."""
    rng = np.random.default_rng(zlib.crc32(f"{benchmark}/{method}/{seed}".encode()))
    run_dir = Path(root) / benchmark / method / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    types = TASK_TYPES.get(benchmark, ["task"])
    metrics = pd.DataFrame({
        "step": np.arange(1, steps + 1),
        "train/success": rng.binomial(16, p_success, steps) / 16,
        "train/return": rng.normal(5, 1, steps),
        "method/multiplier_mean": 1 + rng.normal(0, 0.01, steps) if method.startswith("sharpo") else np.nan,
        "logp_gap": np.abs(rng.normal(0, 1e-3, steps)),
        "time/generation_s": rng.uniform(1, 2, steps),
        "time/update_s": rng.uniform(0.5, 1, steps),
    })
    metrics.to_csv(run_dir / "metrics.csv", index=False)
    rows = []
    eval_steps = sorted({0, *range(eval_every, steps + 1, eval_every), steps})
    for step in eval_steps:
        final = step == eval_steps[-1]
        success = outcomes if final and outcomes is not None else rng.binomial(1, p_success, n_tasks)
        for task in range(n_tasks):
            score = float(success[task]) if benchmark != "webshop" else (1.0 if success[task] else rng.uniform(0, 0.9))
            rows.append({"step": step, "task_id": f"{benchmark}-{task:03d}", "task_type": types[task % len(types)],
                         "success": int(success[task]), "score": score, "return": 10.0 * success[task],
                         "length": int(rng.integers(3, 20))})
    eval_frame = pd.DataFrame(rows)
    eval_frame.to_csv(run_dir / "eval.csv", index=False)
    (run_dir / "protocol.json").write_text(json.dumps({"benchmark": benchmark, "seed": seed}))
    final = eval_frame[eval_frame["step"] == eval_steps[-1]]
    done = {"run_name": f"{method}-{benchmark}-seed{seed}", "benchmark": benchmark, "method": method.split("-")[0],
            "method_label": method, "seed": seed, "steps": steps, "wall_time_s": 60.0 + seed,
            "final_eval": {"success": float(final["success"].mean()), "score": float(final["score"].mean())}}
    (run_dir / "done.json").write_text(json.dumps(done))
    return run_dir
