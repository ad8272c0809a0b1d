"""LoRA through peft on the tiny model: only the adapter trains and is checkpointed, the reference is the base with
the adapter off (bit for bit the base model), a killed run resumes to the same numbers, and a generation engine
gets the adapter itself (a peft folder, a LoRA request), not weights merged into bf16."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import harness.engine.reference
import harness.engine.trainer
from harness.engine import rollout
from harness.engine.run import open_run
from harness.engine.trainer import train
from harness.engine.update import score
from harness.policy.engine_weights import save_adapter
from harness.policy.logprobs import response_logprobs
from harness.policy.models import load_policy
from harness.policy.precision import storage_dtype
from harness.policy.source import tiny_model_dir
from harness.records.run_files import CHECKPOINT
from tests.engine_helpers import assert_same_logs, killed_then_resumed, toy_config
from tests.test_vllm_colocate import RecordingLLM, fake_vllm  # noqa: F401  (the fixture)

LORA = {"lora_rank": 4, "lora_alpha": 8}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def lora_config(tmp_path, models, dtype="float32", **sections):
    return toy_config(tmp_path, models, model={"dtype": dtype, **LORA, **sections.pop("model", {})}, **sections)


def _batch(ctx):
    trajs = rollout.collect(ctx.backend, ctx.benchmark, ctx.envs, list(ctx.train_panel.tasks[:2]), group_size=2,
                            rollout_cfg=ctx.cfg.rollout, max_steps=4, temperature=1.0, seed=3)
    return rollout.to_step_batch(trajs, ctx.tokenizer.pad_token_id)


def _perturb_adapter(model, seed=0):
    """A trained-looking adapter (peft starts B at 0, where adapter on and off agree trivially)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)


def test_only_the_adapter_trains_in_fp32_over_a_base_in_the_compute_dtype(models, tmp_path):
    ctx = open_run(lora_config(tmp_path, models, dtype="bfloat16"))
    trained = {n: p for n, p in ctx.model.named_parameters() if p.requires_grad}
    frozen = {n: p for n, p in ctx.model.named_parameters() if not p.requires_grad}
    assert trained and all(".lora_A." in n or ".lora_B." in n for n in trained)
    assert all(p.dtype == torch.float32 for p in trained.values())
    assert all(p.dtype == torch.bfloat16 for p in frozen.values())
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trained}
    assert adapted == set(ctx.cfg.model.lora_target_modules)  # every projection of the block has an adapter
    optimised = {id(p) for group in ctx.optimizer.param_groups for p in group["params"]}
    assert optimised == {id(p) for p in trained.values()}
    ctx.close("FINISHED")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_reference_is_exactly_the_base_model(models, tmp_path, dtype, monkeypatch):
    monkeypatch.setattr(harness.engine.reference, "FrozenCopy", _no_copy)
    ctx = open_run(lora_config(tmp_path, models, dtype=dtype))
    assert isinstance(ctx.reference, harness.engine.reference.AdapterOff)
    batch = _batch(ctx)
    _perturb_adapter(ctx.model)
    reference = ctx.reference.logprobs(batch, 8)
    base, _ = load_policy(tiny_model_dir(ctx.cfg), storage_dtype(ctx.cfg.model), "cpu")
    assert torch.equal(reference, score(base, batch, 8, "cpu", ctx.precision))
    policy = score(ctx.model, batch, 8, "cpu", ctx.precision)
    assert (policy - reference).abs().max() > 1e-2  # the adapter is on outside the reference pass
    ctx.close("FINISHED")


def _no_copy(*args, **kwargs):
    raise AssertionError("the LoRA reference must not copy the model")


def test_a_checkpoint_holds_the_adapter_and_its_optimizer_state_only(models, tmp_path):
    lora_dir = train(lora_config(tmp_path / "lora", models, train={"steps": 1}))
    full_dir = train(toy_config(tmp_path / "full", models, train={"steps": 1}))
    lora_state = torch.load(lora_dir / CHECKPOINT, weights_only=False)
    assert lora_state["model"] and all(".lora_" in name for name in lora_state["model"])
    assert len(lora_state["optimizer"]["state"]) == len(lora_state["model"])  # AdamW state of the adapter only
    lora_bytes, full_bytes = (d.joinpath(CHECKPOINT).stat().st_size for d in (lora_dir, full_dir))
    print(f"checkpoint: LoRA r=4 {lora_bytes} bytes, full fine-tune {full_bytes} bytes")
    assert lora_bytes < 0.3 * full_bytes


def test_kill_and_resume_matches_the_uninterrupted_lora_run(models, tmp_path, monkeypatch):
    reference = train(lora_config(tmp_path / "ref", models, method="sharpo", train={"lr": 1e-2}))
    resumed = killed_then_resumed(lora_config(tmp_path / "killed", models, method="sharpo", train={"lr": 1e-2}),
                                  monkeypatch)
    assert_same_logs(reference, resumed)
    ours, theirs = (torch.load(d / CHECKPOINT, weights_only=False)["model"] for d in (reference, resumed))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert all(ours[k].abs().max() > 0 for k in ours if "lora_B" in k)  # the adapter did train (B starts at 0)


def test_the_adapter_folder_is_the_one_peft_saves_and_loads_back_to_the_same_policy(models, tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file

    ctx = open_run(lora_config(tmp_path, models))
    _perturb_adapter(ctx.model, seed=1)
    ours = save_adapter(ctx.model, tmp_path / "ours")
    ctx.model.save_pretrained(tmp_path / "peft")
    theirs = load_file(tmp_path / "peft" / "adapter_model.safetensors")
    mine = load_file(ours / "adapter_model.safetensors")
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k].float()) for k in mine)
    base, _ = load_policy(tiny_model_dir(ctx.cfg), "float32", "cpu")
    reloaded = PeftModel.from_pretrained(base, str(ours))  # what an engine reads: the same adapted policy
    batch = _batch(ctx)
    torch.testing.assert_close(score(reloaded, batch, 8, "cpu"), score(ctx.model, batch, 8, "cpu"), rtol=0, atol=1e-6)
    ctx.close("FINISHED")


def test_the_vllm_engine_gets_the_adapter_as_a_lora_request_not_merged_weights(tmp_path, models, fake_vllm):  # noqa: F811
    from safetensors.torch import load_file

    ctx = open_run(lora_config(tmp_path, models, dtype="bfloat16", backend={"name": "vllm"}))
    (llm,) = RecordingLLM.instances
    assert llm.kwargs["dtype"] == "bfloat16"  # the compute dtype, not the fp32 master dtype
    assert (llm.kwargs["enable_lora"], llm.kwargs["max_loras"], llm.kwargs["max_lora_rank"]) == (True, 1, 8)
    first = ctx.backend.lora_request  # the adapter as it was when the engine was built
    _perturb_adapter(ctx.model)
    ctx.backend.sync_weights(ctx.model)
    request = ctx.backend.lora_request
    assert request.lora_int_id == first.lora_int_id + 1  # a new id: vLLM caches adapters by id
    assert not Path(first.lora_path).exists()  # the previous folder is gone
    sent = load_file(Path(request.lora_path) / "adapter_model.safetensors")
    trained = {n: p for n, p in ctx.model.named_parameters() if p.requires_grad}
    assert len(sent) == len(trained) and all(t.dtype == torch.float32 for t in sent.values())
    assert all(torch.equal(sent[n.replace(".default.", ".")], p.detach()) for n, p in trained.items())
    ctx.backend.generate(["x"], temperature=1.0, top_p=1.0, max_new_tokens=4, max_prompt_tokens=64, seed=0)
    assert llm.lora_requests[-1] is request
    assert "reload_weights" not in RecordingLLM.calls  # the frozen bf16 base is never rewritten
    ctx.close("FINISHED")


def test_a_1e_6_update_survives_as_an_adapter_but_not_merged_into_bf16():
    """W ~ N(0, 0.02) in bf16 and a LoRA update of about 1e-6 per weight: merged into W and rounded to bf16, most of
    it is lost; as the adapter an engine gets (A, B cast to bf16, applied next to W) it is kept."""
    generator = torch.Generator().manual_seed(0)
    weight = (torch.randn(512, 512, generator=generator) * 0.02).to(torch.bfloat16)
    lora_a = torch.randn(8, 512, generator=generator) / 512**0.5
    lora_b = torch.randn(512, 8, generator=generator) * 1e-6 / 8**0.5
    delta = (lora_b.double() @ lora_a.double())  # about 1e-6 per weight (scaling alpha / r = 1)
    x = torch.randn(64, 512, generator=generator, dtype=torch.float64)
    exact = x @ delta.T  # the update's effect on the layer's output

    def kept(effective: torch.Tensor) -> float:
        """The share of the update's effect that an effective weight keeps (1 = all, 0 = none)."""
        change = x @ (effective - weight.double()).T
        return float((change * exact).sum() / (exact * exact).sum())

    merged = (weight.double() + delta).to(torch.bfloat16).double()
    adapter = weight.double() + lora_b.to(torch.bfloat16).double() @ lora_a.to(torch.bfloat16).double()
    print(f"kept: merged into bf16 {kept(merged):.3f}, as an adapter {kept(adapter):.4f}")
    assert kept(merged) < 0.1
    assert abs(kept(adapter) - 1) < 0.01


def test_gradient_checkpointing_still_trains_the_adapter(models, tmp_path):
    ctx = open_run(lora_config(tmp_path, models, train={"kl_coef": 0.0}))
    ctx.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    batch = _batch(ctx)
    ctx.model.train()
    logp = response_logprobs(ctx.model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    (logp.sum()).backward()
    grads = [p.grad for n, p in ctx.model.named_parameters() if "lora_B" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
    ctx.close("FINISHED")
