from types import SimpleNamespace


def LoRARequest(name, int_id, path):  # noqa: N802  (vLLM's class name)
    return SimpleNamespace(lora_name=name, lora_int_id=int_id, lora_path=path)
