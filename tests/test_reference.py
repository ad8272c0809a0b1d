"""The KL reference (harness/engine/reference.py): none at kl_coef 0, a frozen copy for a full fine-tune, \
and the offloaded
copy (accelerate's cpu_offload hooks, run here with the CPU as the execution device) scores as the plain one."""
from __future__ import annotations

import pytest
import torch

import harness.engine.reference
from harness.engine import rollout
from harness.engine.reference import FrozenCopy, build_reference
from harness.engine.run import open_run
from harness.engine.trainer import train
from harness.engine.update import score
from tests.engine_helpers import toy_config


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def test_kl_coef_0_builds_no_reference_and_copies_no_module(models, tmp_path, monkeypatch):
    real_deepcopy = harness.engine.reference.copy.deepcopy

    def deepcopy(obj, *args, **kwargs):
        assert not isinstance(obj, torch.nn.Module), "kl_coef 0 must not copy the model"
        return real_deepcopy(obj, *args, **kwargs)

    monkeypatch.setattr(harness.engine.reference.copy, "deepcopy", deepcopy)  # the copy module, for every caller
    ctx = open_run(toy_config(tmp_path, models, train={"kl_coef": 0.0}))
    assert ctx.reference is None
    ctx.close("FINISHED")
    # and the loop runs without ref_logp (the KL term is off)
    assert (train(toy_config(tmp_path / "run", models, train={"kl_coef": 0.0, "steps": 1})) / "done.json").exists()


def test_a_full_fine_tune_gets_a_frozen_copy_and_the_offloaded_one_scores_the_same(models, tmp_path):
    ctx = open_run(toy_config(tmp_path, models))
    assert isinstance(ctx.reference, FrozenCopy) and not ctx.reference.offloaded  # the CPU: a plain copy
    trajs = rollout.collect(ctx.backend, ctx.benchmark, ctx.envs, list(ctx.train_panel.tasks[:2]), group_size=2,
                            rollout_cfg=ctx.cfg.rollout, max_steps=4, temperature=1.0, seed=3)
    batch = rollout.to_step_batch(trajs, ctx.tokenizer.pad_token_id)
    plain = ctx.reference.logprobs(batch, 8)
    assert torch.equal(plain, score(ctx.model, batch, 8, "cpu"))  # the copy is the starting policy
    offloaded = FrozenCopy(ctx.reference.model, ctx.precision, "cpu", offload=True)
    assert offloaded.offloaded
    layer = offloaded.model.model.layers[0].self_attn.q_proj
    assert layer.weight.device.type == "meta"  # the hooks hold the weights in their CPU map, not the module
    assert torch.equal(offloaded.logprobs(batch, 8), plain)
    ctx.close("FINISHED")


def test_the_reference_is_offloaded_only_on_cuda(models, tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(harness.engine.reference, "FrozenCopy", lambda *a, offload: made.append(offload))
    cfg = toy_config(tmp_path, models)
    build_reference(cfg, None, None, "cpu")
    build_reference(cfg, None, None, "cuda")
    off = toy_config(tmp_path, models, train={"reference_offload": False})
    build_reference(off, None, None, "cuda")
    assert made == [False, True, False]
