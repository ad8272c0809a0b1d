"""Properties every method must keep (methods/FORMULAS.md#properties-every-method-keeps): sign(Ã) = sign(A),
A = 0 rows stay 0, λ = 0 is GRPO,
padding is 0, a missing column is named; plus the README example registered from a temporary module."""
from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from pathlib import Path

import pytest
import torch
from synthetic import random_batch

from harness import registry
from harness.batch import COLUMNS, MissingColumnError, StepBatch

ALL = ["grpo", "gigpo", "rlsd", "sdar", "grpo_opsd", "stepopsd", "sharpo"]
MULTIPLICATIVE = ["rlsd", "sharpo", "stepopsd", "sdar", "grpo_opsd"]
TO_GRPO = {
    "rlsd": {"lam": 0.0},
    "sharpo": {"lam": 0.0},
    "stepopsd": {"lam_mix": 0.0},
    "sdar": {"coef": 0.0},
    "grpo_opsd": {"coef": 0.0},
    "gigpo": {"omega": 0.0, "mode": "mean_std_norm"},
}
# strong settings, so the multipliers move far from 1 and the sign test has teeth
STRONG = {"rlsd": {"lam": 1.0, "clip_eps": 0.9}, "sharpo": {"lam": 1.0, "tau": 0.1}, "stepopsd": {"lam_mix": 5.0}}


@pytest.fixture(scope="module")
def batch():
    return random_batch(rows=600, response_len=24, max_segments=12, seed=1, invalid_rate=0.0)


@pytest.fixture(scope="module")
def grpo_adv(batch):
    return registry.build("grpo").advantages(batch)[0]


def test_registry_lists_the_seven_methods():
    assert set(ALL) <= set(registry.available())
    for name in ALL:
        cls = registry.get(name)
        assert set(cls.requires) <= set(COLUMNS), name
        assert cls.teacher in registry.TEACHER_CONTEXTS + (None,)
        assert dataclasses.is_dataclass(cls.Config)


@pytest.mark.parametrize("name", MULTIPLICATIVE)
def test_sign_preserved_and_zero_rows_stay_zero(name, batch, grpo_adv):
    adv, diag = registry.build(name, STRONG.get(name, {})).advantages(batch, step=0)
    assert (grpo_adv == 0).any() and (grpo_adv != 0).any()  # the batch has both kinds of rows
    assert torch.equal(torch.sign(adv), torch.sign(grpo_adv))
    assert diag["zero_adv_frac"] == pytest.approx(float((grpo_adv[:, 0] == 0).double().mean()))
    if name in STRONG:
        assert diag["multiplier_max"] - diag["multiplier_min"] > 0.1


@pytest.mark.parametrize("name", list(TO_GRPO))
def test_zero_strength_is_exactly_grpo(name, batch, grpo_adv):
    adv, _ = registry.build(name, TO_GRPO[name]).advantages(batch, step=3)
    assert torch.equal(adv, grpo_adv)


@pytest.mark.parametrize("name", ALL)
def test_padding_is_zero_and_diagnostics_are_floats(name, batch):
    adv, diag = registry.build(name).advantages(batch, step=1)
    assert adv.shape == batch.response_mask.shape and adv.dtype == torch.float32
    assert adv[~batch.response_mask].abs().sum() == 0
    assert torch.isfinite(adv).all()
    assert diag and all(isinstance(v, float) for v in diag.values()), diag
    assert "zero_adv_frac" in diag


@pytest.mark.parametrize("name", ALL)
def test_missing_column_is_named(name, batch):
    missing = registry.get(name).requires[-1]
    cols = {k: v for k, v in batch.state_dict().items() if k != missing}
    with pytest.raises(MissingColumnError, match=rf"method '{name}' needs batch column\(s\) \['{missing}'\]"):
        registry.build(name).advantages(StepBatch(**cols))


def readme_example() -> str:
    text = (Path(__file__).parents[1] / "methods" / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "methods/README.md should hold exactly one python block: the example"
    return blocks[0]


def test_readme_example_matches_examples_file():
    shipped = (Path(__file__).parents[1] / "examples" / "my_method.py").read_text()
    assert readme_example() == shipped
    assert len(readme_example().splitlines()) < 60


def test_readme_example_registers_from_a_temporary_module(tmp_path, monkeypatch, batch, grpo_adv):
    (tmp_path / "readme_method_tmp.py").write_text(readme_example())
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        method = registry.build("readme_method_tmp:ClippedGrpo", {"cap": 0.5, "valid_bonus": 1.0})
        assert registry.get("clippedgrpo") is type(method)  # registered under its class name
        adv, diag = method.advantages(batch)
    finally:
        sys.modules.pop("readme_method_tmp", None)
        registry._REGISTRY.pop("clippedgrpo", None)
    expected = grpo_adv.clamp(-0.5, 0.5) * (1.0 + batch.action_valid.float())[:, None]
    assert torch.allclose(adv, expected, atol=1e-6)
    assert 0.0 < diag["clip_frac"] < 1.0
