"""Shared set-up for engine tests: a tiny config on the toy door benchmark, in a temporary folder."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

import tests.toy_benchmark  # noqa: F401  (registers the toy benchmark: `benchmark: toy`)
from harness.config import config_from_dict


def toy_config(tmp_path: Path, model_cache: Path | None = None, tracking: bool = False, **sections):
    """``model_cache`` shared between tests saves rebuilding the tiny model; MLflow only where a test checks it."""
    raw = {
        "profile": "test",
        "benchmark": "toy",  # registered by tests/toy_benchmark.py, the way a new benchmark package registers
        "method": "grpo",
        "seed": 0,
        "model": {"source": "tiny", "dtype": "float32", "gradient_checkpointing": False, "tiny_hidden": 32,
                  "tiny_layers": 1, "tiny_heads": 2, "tiny_vocab": 300, "warm_start_epochs": 2,
                  "warm_start_lr": 3e-3, "warm_start_demos": 8, "cache_dir": str(model_cache or tmp_path / "models")},
        "backend": {"name": "hf"},
        "rollout": {"tasks_per_step": 2, "group_size": 3, "max_prompt_tokens": 256, "max_response_tokens": 12,
                    "think": False, "env_workers": 0, "generation_batch": 16},
        "train": {"steps": 3, "lr": 1e-3, "ppo_mini_batch": 8, "ppo_micro_batch": 8, "checkpoint_every": 1,
                  "device": "cpu", "cpu_threads": 1},
        "eval": {"every": 2, "panel_size": 2, "split": "eval_out"},
        "tracking": {"enabled": tracking, "uri": f"sqlite:///{tmp_path}/mlflow.db",
                     "artifact_root": str(tmp_path / "artifacts")},
        "output_dir": str(tmp_path / "runs"),
    }
    for name, values in sections.items():
        raw[name] = {**raw[name], **values} if isinstance(raw.get(name), dict) else values
    return config_from_dict(raw)


def comparable_metrics(run_dir: Path) -> pd.DataFrame:
    """metrics.csv without wall-clock columns (the only legitimately non-deterministic ones)."""
    frame = pd.read_csv(run_dir / "metrics.csv")
    return frame[[c for c in frame.columns if not c.startswith("time/")]]


def killed_then_resumed(cfg, monkeypatch, kill_at: int = 2) -> Path:
    """Train ``cfg`` until a simulated kill at step ``kill_at``, check that a plain restart refuses the partial
    run, then ``--resume`` it; returns the run folder."""
    import pytest

    import harness.engine.trainer
    from harness.records.run_state import PartialRunError

    real_step = harness.engine.trainer.rl_step

    def dies(ctx, step):
        if step == kill_at:
            raise KeyboardInterrupt("simulated kill")
        return real_step(ctx, step)

    monkeypatch.setattr(harness.engine.trainer, "rl_step", dies)
    with pytest.raises(KeyboardInterrupt):
        harness.engine.trainer.train(cfg)
    assert not (cfg.run_dir / "done.json").exists()
    with pytest.raises(PartialRunError, match="--resume"):
        harness.engine.trainer.train(cfg)
    monkeypatch.setattr(harness.engine.trainer, "rl_step", real_step)
    return harness.engine.trainer.train(cfg, resume=True)


def assert_same_logs(reference: Path, resumed: Path) -> None:
    """The same metrics (wall-clock columns aside) and the same evaluated episodes."""
    pd.testing.assert_frame_equal(comparable_metrics(reference), comparable_metrics(resumed))
    pd.testing.assert_frame_equal(pd.read_csv(reference / "eval.csv"), pd.read_csv(resumed / "eval.csv"))
