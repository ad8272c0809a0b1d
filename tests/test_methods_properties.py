"""Properties every registered method keeps (methods/FORMULAS.md#properties-every-method-keeps): sign(Ã) = sign(A)
and A = 0 rows stay 0, the GRPO limit is exactly GRPO, padding is 0, a missing column is named; plus the README
example registered from a temporary module.

The tests run over ``registry.available()``, so a new module in methods/ is checked without editing this file. What a
method promises is declared on its class (``keeps_sign``, ``grpo_limit``, ``stress_options``), and each method sees
only the batch columns it ``requires``: one that reads a column it did not declare fails here, not mid-run.
"""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import torch
from synthetic import random_batch

from harness.core import registry
from harness.core.batch import COLUMNS, MissingColumnError, StepBatch

METHODS = registry.available()


@pytest.fixture(scope="module")
def batch():
    return random_batch(rows=600, response_len=24, max_segments=12, seed=1, invalid_rate=0.0)


@pytest.fixture(scope="module")
def grpo_adv(batch):
    return registry.build("grpo").advantages(batch)[0]


def columns_for(name: str, batch: StepBatch) -> StepBatch:
    """The batch cut down to the columns the method declares in ``requires``."""
    requires = registry.get(name).requires
    absent = sorted(set(requires) - set(batch.columns))
    assert not absent, f"tests/synthetic.py random_batch builds no column {absent}, which {name!r} requires; add it"
    return StepBatch(**{k: batch.state_dict()[k] for k in requires})


def test_the_shipped_methods_are_registered():
    assert {"grpo", "gigpo", "rlsd", "sdar", "grpo_opsd", "stepopsd", "sharpo", "agentopsd", "hgpo"} <= set(METHODS)


@pytest.mark.parametrize("name", METHODS)
def test_display_name_and_order_are_declared(name):
    """Tables and figures take a method's name and row order from its class (paper_figures/render.py)."""
    cls = registry.get(name)
    assert cls.display_name and isinstance(cls.display_order, int), f"{name}: set display_name and display_order"


@pytest.mark.parametrize("name", METHODS)
def test_declarations_are_consistent(name):
    cls = registry.get(name)
    assert set(cls.requires) <= set(COLUMNS), name
    assert cls.teacher is None or cls.teacher in registry.TEACHER_CONTEXTS
    if cls.keeps_sign:
        assert cls.grpo_limit is not None, f"{name} keeps sign(A): declare grpo_limit, the options where it is GRPO"
    for options in (cls.grpo_limit or {}, cls.stress_options):
        registry.build(name, options)  # the declared options exist and are valid


@pytest.mark.parametrize("name", [m for m in METHODS if registry.get(m).keeps_sign])
def test_sign_preserved_and_zero_rows_stay_zero(name, batch, grpo_adv):
    cls = registry.get(name)
    adv, diag = registry.build(name, cls.stress_options).advantages(columns_for(name, batch), step=0)
    assert (grpo_adv == 0).any() and (grpo_adv != 0).any()  # the batch has both kinds of rows
    assert torch.equal(torch.sign(adv), torch.sign(grpo_adv))
    assert diag["zero_adv_frac"] == pytest.approx(float((grpo_adv[:, 0] == 0).double().mean()))
    if cls.stress_options:
        assert diag["multiplier_max"] - diag["multiplier_min"] > 0.1  # the stress options do move the multiplier


@pytest.mark.parametrize("name", [m for m in METHODS if registry.get(m).grpo_limit is not None])
def test_grpo_limit_is_exactly_grpo(name, batch, grpo_adv):
    method = registry.build(name, registry.get(name).grpo_limit)
    own = columns_for(name, batch)
    adv, _ = method.advantages(own, step=3)
    assert torch.equal(adv, grpo_adv)
    aux = method.aux_loss(own, batch.old_logp.clone().requires_grad_(), step=3)
    assert aux is None or float(aux[0].detach()) == 0.0  # so the whole loss is GRPO's


@pytest.mark.parametrize("name", METHODS)
def test_padding_is_zero_and_diagnostics_are_floats(name, batch):
    adv, diag = registry.build(name).advantages(columns_for(name, batch), step=1)
    assert adv.shape == batch.response_mask.shape and adv.dtype == torch.float32
    assert adv[~batch.response_mask].abs().sum() == 0
    assert torch.isfinite(adv).all()
    assert diag and all(isinstance(v, float) for v in diag.values()), diag
    assert "zero_adv_frac" in diag


@pytest.mark.parametrize("name", METHODS)
def test_each_missing_column_is_named(name, batch):
    own = columns_for(name, batch).state_dict()
    for missing in registry.get(name).requires:
        cols = {k: v for k, v in own.items() if k != missing}
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
        registry.METHODS.unregister("clippedgrpo")
    expected = grpo_adv.clamp(-0.5, 0.5) * (1.0 + batch.action_valid.float())[:, None]
    assert torch.allclose(adv, expected, atol=1e-6)
    assert 0.0 < diag["clip_frac"] < 1.0
