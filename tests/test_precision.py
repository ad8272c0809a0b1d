"""fp32 master weights with bf16 compute (harness/policy/precision.py): a 1e-6 step is kept, and every forward \
of the run
(generation, scoring, reference, teacher, update) runs in the compute dtype."""
from __future__ import annotations

import pytest
import torch

from harness.engine import rollout
from harness.engine.run import open_run
from harness.engine.update import ppo_update, score
from harness.policy.precision import Precision
from harness.preflight import StartupError
from tests.engine_helpers import toy_config


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def _bf16_run(tmp_path, models, **sections):
    train = {"lr": 1e-6, "ppo_mini_batch": 64, "ppo_micro_batch": 8, **sections.pop("train", {})}
    return open_run(toy_config(tmp_path, models, model={"dtype": "bfloat16"}, train=train, **sections))


def _batch(ctx):
    trajs = rollout.collect(ctx.backend, ctx.benchmark, ctx.envs, list(ctx.train_panel.tasks[:2]), group_size=2,
                            rollout_cfg=ctx.cfg.rollout, max_steps=4, temperature=1.0, seed=3)
    batch = rollout.to_step_batch(trajs, ctx.tokenizer.pad_token_id)
    batch = batch.with_columns(old_logp=score(ctx.model, batch, 8, "cpu", ctx.precision))
    if ctx.reference is not None:
        batch = batch.with_columns(ref_logp=ctx.reference.logprobs(batch, 8))
    return trajs, batch


def changed_fraction(before: dict[str, torch.Tensor], model) -> tuple[float, int]:
    """Share of the elements that received a nonzero gradient whose value changed, and how many received one."""
    changed = received = 0
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        got = p.grad != 0
        changed += int((p.detach() != before[name])[got].sum())
        received += int(got.sum())
    return changed / max(received, 1), received


def test_one_update_at_lr_1e6_with_bf16_compute_changes_nearly_every_weight(models, tmp_path):
    ctx = _bf16_run(tmp_path, models)
    assert ctx.precision == Precision("bfloat16", "cpu") and ctx.accelerator.mixed_precision == "bf16"
    _, batch = _batch(ctx)
    before = {name: p.detach().clone() for name, p in ctx.model.named_parameters()}
    signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(batch.num_rows)])
    assert batch.num_rows <= ctx.cfg.train.ppo_mini_batch  # one optimiser step
    ppo_update(ctx.model, ctx.optimizer, ctx.accelerator, batch, signs[:, None] * batch.response_mask, ctx.method,
               ctx.cfg.train, 0, 0)
    fraction, received = changed_fraction(before, ctx.model)
    print(f"changed {fraction:.4f} of {received} weight elements with a gradient (lr 1e-6, bf16 compute)")
    assert received > 1000 and fraction > 0.9
    # the master weights and AdamW's state are float32
    assert all(p.dtype == torch.float32 for p in ctx.model.parameters())
    states = [s for s in ctx.optimizer.state_dict()["state"].values()]
    assert states and all(s[k].dtype == torch.float32 for s in states for k in ("exp_avg", "exp_avg_sq"))
    ctx.close("FINISHED")


def test_every_forward_of_a_step_runs_in_the_compute_dtype(models, tmp_path):
    ctx = _bf16_run(tmp_path, models, method="sharpo")  # sharpo: a teacher pass too; kl_coef > 0: a reference
    seen: list[torch.dtype] = []
    hook = lambda module, inputs, output: seen.append(output.dtype)  # noqa: E731
    policy_q = ctx.model.model.layers[0].self_attn.q_proj
    reference_q = ctx.reference.model.model.layers[0].self_attn.q_proj

    def dtypes_of(fn, layer=policy_q):
        seen.clear()
        handle = layer.register_forward_hook(hook)
        try:
            fn()
        finally:
            handle.remove()
        assert seen, "the pass did not run the layer"
        return set(seen)

    trajs, batch = _batch(ctx)
    bf16 = {torch.bfloat16}
    assert dtypes_of(lambda: _batch(ctx)) == bf16  # generation (hf backend) and scoring
    assert dtypes_of(lambda: ctx.reference.logprobs(batch, 8), reference_q) == bf16
    assert dtypes_of(lambda: ctx.teacher.score(batch, trajs, "skills")) == bf16
    advantages = torch.ones_like(batch.old_logp) * batch.response_mask
    assert dtypes_of(lambda: ppo_update(ctx.model, ctx.optimizer, ctx.accelerator, batch, advantages, ctx.method,
                                        ctx.cfg.train, 0, 0)) == bf16
    ctx.close("FINISHED")


def test_the_reference_copy_matches_the_starting_policy_exactly(models, tmp_path):
    """Same fp32 weights, same autocast: at step 0 the KL term sees ref_logp == old_logp, bit for bit."""
    ctx = _bf16_run(tmp_path, models)
    _, batch = _batch(ctx)
    assert torch.equal(ctx.reference.logprobs(batch, 8), batch.old_logp)
    assert all(not p.requires_grad for p in ctx.reference.model.parameters())
    ctx.close("FINISHED")


def test_float16_on_the_cpu_is_refused_with_the_fix_before_any_model_loads(models, tmp_path, monkeypatch):
    import harness.policy.source

    monkeypatch.setattr(harness.policy.source, "load_policy", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(StartupError, match="model.dtype=float16 needs a CUDA device.*bfloat16"):
        open_run(toy_config(tmp_path, models, model={"dtype": "float16"}))
    with pytest.raises(ValueError, match="float16 needs a CUDA device.*bfloat16"):
        Precision("float16", "cpu")
