"""Does the documented GPU environment resolve, with torch and vLLM of one CUDA major? (`make check-gpu-env`, CI)

The GPU set is pyproject.toml with its `gpu` and `test` extras plus requirements/gpu.in's pins, installed on a GPU
machine from requirements/gpu-lock.txt (`make setup-gpu`). This script resolves it for the Linux x86_64 CUDA
platform with ``uv pip compile`` (package metadata only: no wheel is downloaded, a few seconds with a warm cache),
then checks what a resolver cannot see: the CUDA major of torch's runtime libraries against the one the vLLM
release's wheel was built for, and transformers inside that release's range. It also re-resolves the lock itself
(every pinned version must exist for the platform) and compares its torch and vLLM with a fresh resolution.

    python scripts/check_gpu_env.py            # check (exit 1 naming each problem)
    python scripts/check_gpu_env.py --write    # rewrite requirements/gpu-lock.txt from a fresh resolution
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements" / "gpu-lock.txt"
INPUTS = ["pyproject.toml", "--extra", "gpu", "--extra", "test", "requirements/gpu.in"]
# glibc 2.34 (RHEL 9, Ubuntu 22.04 and later): vLLM 0.32 needs llguidance 1.7, whose wheels are manylinux_2_31
PLATFORM, PYTHON = "x86_64-manylinux_2_34", "3.11"
# What each supported vLLM release's PyPI wheel was built against, read from its metadata (pip install --dry-run
# --report vllm==0.32.0): torch==2.13.0, nvidia-cutlass-dsl[cu13], humming-kernels[cu13], transformers<5.20.0,>=5.16.1
VLLM_BUILDS = {"0.32": {"cuda": 13, "torch": "==2.13.0", "transformers": ">=5.16.1,<5.20"}}
# torch's own CUDA runtime libraries (nvidia-cutlass-dsl-libs-cu12 is not one: cutlass-dsl ships both majors)
TORCH_CUDA_LIBS = re.compile(r"^nvidia-(cuda-runtime|cudnn|nccl|cublas|cusparselt|nvshmem|cuda-nvrtc)-cu(\d+)$")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def pins(lock_text: str) -> dict[str, str]:
    """name (normalised) -> pinned version, from a requirements file of ``name==version`` lines."""
    found = {}
    for line in lock_text.splitlines():
        match = PIN.match(line.strip())
        if match:
            found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return found


def torch_cuda_majors(pinned: dict[str, str]) -> dict[str, int]:
    """Each package that fixes torch's CUDA major -> that major: a ``+cuXYZ`` torch build, cuda-toolkit,
    nvidia-cuda-runtime, and torch's ``nvidia-*-cuNN`` libraries."""
    majors = {}
    torch = pinned.get("torch", "")
    local = torch.partition("+")[2]
    if local.startswith("cu") and local[2:].isdigit():
        majors[f"torch=={torch}"] = int(local[2:-1])
    for name in ("cuda-toolkit", "nvidia-cuda-runtime"):
        if name in pinned:
            majors[f"{name}=={pinned[name]}"] = Version(pinned[name]).major
    for name, version in pinned.items():
        match = TORCH_CUDA_LIBS.match(name)
        if match:
            majors[f"{name}=={version}"] = int(match.group(2))
    return majors


def problems(pinned: dict[str, str]) -> list[str]:
    """What is wrong with a resolved GPU set, each with its fix; empty when torch, vLLM and transformers agree."""
    found = []
    torch, vllm = pinned.get("torch"), pinned.get("vllm")
    if torch is None or vllm is None:
        return [f"the set lacks {'torch' if torch is None else 'vllm'}: resolve pyproject.toml's gpu extra"]
    if torch.endswith("+cpu"):
        found.append(f"torch=={torch} is the CPU build: install torch from PyPI's default index (its Linux wheel is "
                     "the CUDA build), not the CPU index")
    release = ".".join(vllm.split(".")[:2])
    build = VLLM_BUILDS.get(release)
    if build is None:
        return found + [f"vllm=={vllm} is not a release this project supports ({sorted(VLLM_BUILDS)}): pin vllm "
                        "in requirements/gpu.in to one of them"]
    if Version(torch.split("+")[0]) not in SpecifierSet(build["torch"]):
        found.append(f"torch=={torch} but vllm=={vllm} is built against torch{build['torch']}: pin that torch")
    majors = torch_cuda_majors(pinned)
    wrong = {package: major for package, major in majors.items() if major != build["cuda"]}
    if not majors:
        found.append("no CUDA runtime package in the set (cuda-toolkit, nvidia-*-cuNN): is torch the CUDA build?")
    if wrong:
        found.append(f"vllm=={vllm} is built for CUDA {build['cuda']}, but the set holds CUDA "
                     f"{sorted(set(wrong.values()))} runtime packages {sorted(wrong)}: install torch from PyPI's "
                     f"default index (CUDA {build['cuda']}), never from a cu12x index")
    transformers = pinned.get("transformers")
    if transformers and Version(transformers) not in SpecifierSet(build["transformers"]):
        found.append(f"transformers=={transformers} is outside vllm=={vllm}'s range {build['transformers']}: pin "
                     f"transformers{build['transformers']} (requirements/gpu.in)")
    return found


def resolve(inputs: list[str], out: Path) -> str:
    """``uv pip compile`` for the GPU platform; the resolver's own message on failure (a conflict is named)."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise SystemExit("check_gpu_env: the uv resolver is not installed: `pip install -e '.[test]'` (or make setup)")
    command = [uv, "pip", "compile", "--no-config", "--quiet", "--python-platform", PLATFORM, "--python-version",
               PYTHON, "--no-header", "--no-annotate", "-o", str(out), *inputs]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"check_gpu_env: the GPU set does not resolve for {PLATFORM}, Python {PYTHON} "
                         f"({' '.join(inputs)}):\n{done.stderr.strip()}")
    return out.read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"rewrite {LOCK.relative_to(REPO)} from a fresh "
                                                            "resolution (after changing requirements/gpu.in)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh_text = resolve(INPUTS, Path(tmp) / "fresh.txt")
        fresh = pins(fresh_text)
        report = [f"fresh resolution: {p}" for p in problems(fresh)]
        if args.write and not report:
            LOCK.write_text(f"# `make gpu-lock` ({PLATFORM}, Python {PYTHON}) from {' '.join(INPUTS)}\n" + fresh_text)
        locked = pins(LOCK.read_text()) if LOCK.exists() else {}
        if not locked:
            report.append(f"{LOCK.relative_to(REPO)} is missing: run `make gpu-lock`")
        else:
            resolve([str(LOCK.relative_to(REPO))], Path(tmp) / "lock.txt")  # every pin exists for the platform
            report += [f"{LOCK.name}: {p}" for p in problems(locked)]
            report += [f"{LOCK.name} pins {name}=={locked.get(name)} but the inputs resolve {name}=={fresh.get(name)}: "
                       "run `make gpu-lock`" for name in ("torch", "vllm") if locked.get(name) != fresh.get(name)]
    for line in report:
        print(f"check_gpu_env: {line}", file=sys.stderr)
    if not report:
        majors = sorted(set(torch_cuda_majors(locked).values()))
        print(f"check_gpu_env: the GPU set resolves for {PLATFORM}, Python {PYTHON}: torch=={locked['torch']} "
              f"(CUDA {majors}), vllm=={locked['vllm']}, transformers=={locked.get('transformers')}; "
              f"{len(locked)} packages in {LOCK.relative_to(REPO)}")
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
