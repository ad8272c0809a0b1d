"""``python -m harness doctor``: is this machine's GPU stack one that loads? Prints the torch, CUDA, driver, vLLM
and transformers versions, imports vLLM's compiled ops, and names each problem with its fix.

The facts are collected once (:func:`collect`) and judged by :func:`problems`, a pure function, so every rule is
tested on the CPU with the facts of a broken GPU machine (tests/test_doctor.py). On a machine without a GPU it says
so and checks only what the CPU profiles need; exit 0 = nothing wrong, 1 = a problem was named.
"""
from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

# The oldest driver each CUDA major runs on (NVIDIA's CUDA toolkit release notes, table 3: 12.0 GA 525.60.13,
# 13.0 GA 580.65.06); an older driver fails at the first CUDA call with "driver too old".
MIN_DRIVER = {12: (525, 60), 13: (580, 65)}
FIX_STACK = "run `make setup-gpu` (requirements/gpu-lock.txt: torch 2.13.0 and vLLM 0.32.0, both CUDA 13)"


@dataclass
class Facts:
    torch: str | None = None  # torch.__version__
    torch_cuda: str | None = None  # torch.version.cuda (None: a CPU build)
    gpus: list[str] = field(default_factory=list)  # names of the CUDA devices torch sees
    driver: str | None = None  # the NVIDIA driver's version (nvidia-smi)
    vllm: str | None = None  # the installed vLLM distribution's version (metadata; None = not installed)
    vllm_requires: list[str] = field(default_factory=list)  # its declared requirements
    vllm_import_error: str | None = None  # what importing vllm and its compiled ops raised
    transformers: str | None = None
    alloc_conf: str = ""  # $PYTORCH_CUDA_ALLOC_CONF


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _driver() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def _import_vllm(has_gpu: bool) -> str | None:
    """Import vLLM and, on a GPU machine, its compiled CUDA ops (where a torch of another CUDA major fails)."""
    try:
        importlib.import_module("vllm")
        if has_gpu:
            importlib.import_module("vllm._C")
    except Exception as err:  # ImportError, OSError (undefined symbol, libcudart.so.12 missing), RuntimeError
        return f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
    return None


def collect() -> Facts:
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() \
        else []
    vllm = _version("vllm")
    return Facts(torch=torch.__version__, torch_cuda=torch.version.cuda, gpus=gpus, driver=_driver(), vllm=vllm,
                 vllm_requires=list(metadata.requires("vllm") or []) if vllm else [],
                 vllm_import_error=_import_vllm(bool(gpus)) if vllm else None, transformers=_version("transformers"),
                 alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))


def vllm_cuda_major(requires: list[str]) -> int | None:
    """The CUDA major vLLM's wheel was built for, from its ``[cuNN]`` extras (0.32.0: nvidia-cutlass-dsl[cu13])."""
    majors = {int(m) for line in requires if "extra ==" not in line for m in re.findall(r"\[cu(\d+)\]", line)}
    return majors.pop() if len(majors) == 1 else None


def _requirement(requires: list[str], name: str):
    from packaging.requirements import Requirement

    for line in requires:
        req = Requirement(line)
        if req.name.lower() == name and (req.marker is None or "extra" not in str(req.marker)):
            return req
    return None


def problems(facts: Facts) -> list[str]:
    """Each thing wrong with ``facts`` for the GPU profiles, with its fix (empty: the stack loads)."""
    if not facts.gpus:
        return []  # judged by :func:`cpu_notes`: nothing GPU-specific can be wrong here
    found = []
    if facts.torch_cuda is None:
        found.append(f"torch {facts.torch} is a CPU build on a machine with GPUs: {FIX_STACK}")
    found += _driver_problems(facts) + _vllm_problems(facts)
    if "expandable_segments:true" in facts.alloc_conf.replace(" ", "").lower():
        found.append("PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True, which vLLM's sleep mode (its cuMem "
                     "allocator) asserts against: unset it for runs with backend.name=vllm")
    return found


def _driver_problems(facts: Facts) -> list[str]:
    if facts.torch_cuda is None or facts.driver is None:
        return [] if facts.driver else ["nvidia-smi is not on PATH, so the driver's version is unknown: load the "
                                        "site's NVIDIA driver module, or check `cat /proc/driver/nvidia/version`"]
    major = int(facts.torch_cuda.split(".")[0])
    need = MIN_DRIVER.get(major)
    have = tuple(int(p) for p in re.findall(r"\d+", facts.driver)[:2])
    if need and have < need:
        return [f"driver {facts.driver} is older than CUDA {facts.torch_cuda} needs ({need[0]}.{need[1]} or newer): "
                f"ask for a node with a newer driver, or install a torch built for the driver's CUDA"]
    return []


def _vllm_problems(facts: Facts) -> list[str]:
    from packaging.version import Version

    from harness.policy.backends.vllm import SUPPORTED_TEXT, SUPPORTED_VLLM

    if facts.vllm is None:
        return [f"vLLM is not installed (the paper profiles' backend.name=vllm): {FIX_STACK}"]
    found = []
    low, high = SUPPORTED_VLLM
    if not low <= Version(facts.vllm).release[:2] < high:
        found.append(f"vLLM {facts.vllm} is installed, the vllm backend supports {SUPPORTED_TEXT}: {FIX_STACK}")
    wanted = vllm_cuda_major(facts.vllm_requires)
    if wanted is not None and facts.torch_cuda and int(facts.torch_cuda.split(".")[0]) != wanted:
        found.append(f"torch {facts.torch} is built for CUDA {facts.torch_cuda}, vLLM {facts.vllm} for CUDA {wanted}: "
                     f"its compiled ops will not load; install torch from PyPI's default index, not a cu12x one "
                     f"({FIX_STACK})")
    req = _requirement(facts.vllm_requires, "transformers")
    if req is not None and facts.transformers and not req.specifier.contains(facts.transformers, prereleases=True):
        found.append(f"transformers {facts.transformers} is outside vLLM {facts.vllm}'s range {req.specifier}: "
                     f"pip install 'transformers{req.specifier}' ({FIX_STACK})")
    if facts.vllm_import_error:
        found.append(f"importing vLLM failed ({facts.vllm_import_error}): {FIX_STACK}")
    return found


def report(facts: Facts) -> str:
    lines = [f"torch {facts.torch} (CUDA {facts.torch_cuda or 'none: a CPU build'})",
             f"GPUs: {', '.join(facts.gpus) if facts.gpus else 'no GPU (torch sees no CUDA device)'}",
             f"NVIDIA driver: {facts.driver or 'none found (no nvidia-smi)'}",
             f"vLLM: {facts.vllm or 'not installed'}" + (
                 f" (built for CUDA {vllm_cuda_major(facts.vllm_requires)})" if facts.vllm_requires else "")
             + ("" if not facts.vllm else f"; import: {facts.vllm_import_error or 'ok'}"),
             f"transformers: {facts.transformers}",
             f"PYTORCH_CUDA_ALLOC_CONF: {facts.alloc_conf or '(unset)'}"]
    found = problems(facts)
    if not facts.gpus:
        lines.append("no GPU: the CPU profiles (cpu, tiny, smoke) run here; the GPU stack was not checked (run "
                     "`python -m harness doctor` on the GPU node)")
    lines += [f"PROBLEM: {p}" for p in found] or ([] if not facts.gpus else ["ok: the GPU stack loads"])
    return "\n".join(lines)


def main() -> int:
    facts = collect()
    print(report(facts))
    return 1 if problems(facts) else 0
