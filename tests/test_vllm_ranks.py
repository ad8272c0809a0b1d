"""The paper profile's layout, FSDP ranks x one vLLM engine per rank, on the recording stand-in for ``vllm.LLM``
(tests/test_vllm_colocate.py): the arguments each rank's engine is built with, and the start-up check that refuses
a strategy x backend layout that cannot run, before any weight loads."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.config import load_config
from harness.core.seeding import step_seed
from harness.policy.backends import engine_config, make_backend
from harness.policy.backends.vllm import launch_arguments
from harness.policy.precision import Precision
from tests.test_vllm_colocate import RecordingLLM, fake_vllm  # noqa: F401  (the fixture)

WORLD = 2
SEED = 123


class _Tokenizer:
    eos_token_id = 2

    def get_vocab(self):
        return {"<|im_end|>": 3}


def _paper(tmp_path, *overrides):
    folder = tmp_path / "qwen7b"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{}")
    return load_config("config/paper.yaml", [f"model.source={folder}", "tracking.enabled=false",
                                             f"output_dir={tmp_path / 'runs'}", *overrides])


def _as_rank(monkeypatch, rank: int) -> None:
    """The environment torchrun gives rank ``rank`` of ``WORLD`` on one node."""
    for name, value in {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": WORLD, "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": 29500}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)


def test_each_rank_builds_its_own_engine_on_its_gpu_in_the_launchers_group(tmp_path, monkeypatch, fake_vllm):  # noqa: F811
    cfg = _paper(tmp_path)
    model = SimpleNamespace(name_or_path=str(cfg.model.source), dtype=torch.float32)

    def no_new_group(*args, **kwargs):
        raise AssertionError("the backend started a process group of its own")

    monkeypatch.setattr(torch.distributed, "init_process_group", no_new_group)
    for rank in range(WORLD):
        _as_rank(monkeypatch, rank)
        make_backend(engine_config(cfg), model, _Tokenizer(), torch.device("cuda", rank), Precision("bfloat16"),
                     seed=SEED)
    first, second = RecordingLLM.instances
    for rank, llm in enumerate((first, second)):
        assert llm.kwargs["distributed_executor_backend"] == "external_launcher"  # joins torchrun's group
        assert llm.kwargs["tensor_parallel_size"] == 1  # one GPU: the rank's
        assert llm.kwargs["seed"] == step_seed(SEED, rank, "engine") % 2**31
        assert llm.kwargs["dtype"] == "bfloat16" and llm.kwargs["enable_sleep_mode"] is True
        assert llm.environ == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
                               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                               "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # in-process, as external_launcher needs
    assert first.kwargs["seed"] != second.kwargs["seed"]
    # each engine is built with its rank's GPU current, not all of them on GPU 0
    assert RecordingLLM.calls == ["set_device(cuda:0)", "LLM", "set_device(cuda:1)", "LLM"]


def test_one_process_keeps_one_engine_over_the_gpus(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert launch_arguments(4, SEED) == {"tensor_parallel_size": 4, "seed": SEED}


def test_a_rank_without_torchruns_variables_is_refused(monkeypatch):
    _as_rank(monkeypatch, 1)
    monkeypatch.delenv("LOCAL_RANK")
    with pytest.raises(ValueError, match=r"\['LOCAL_RANK'\] are not set: launch the run with torchrun"):
        launch_arguments(1, SEED)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match="tensor_parallel_size=1"):
        launch_arguments(2, SEED)


def test_start_up_refuses_an_unsupported_layout_before_any_weight(tmp_path, monkeypatch, fake_vllm, capsys):  # noqa: F811
    from harness import cli
    from harness.engine import run
    from harness.preflight import StartupError, check_start_up

    check_start_up(_paper(tmp_path), training=False)  # the paper's layout: FSDP x one engine per rank
    check_start_up(_paper(tmp_path, "train.strategy=single", "backend.tensor_parallel_size=8"), training=False)
    with pytest.raises(StartupError, match="backend.tensor_parallel_size must be 1"):
        check_start_up(_paper(tmp_path, "backend.tensor_parallel_size=2"), training=False)

    def no_weights(*args, **kwargs):
        raise AssertionError("weights were loaded before the layout was checked")

    monkeypatch.setattr(run, "prepare_policy", no_weights)
    code = cli.main(["train", "--config", "config/paper.yaml", f"model.source={tmp_path / 'qwen7b'}",
                     "tracking.enabled=false", f"output_dir={tmp_path / 'runs'}", "backend.tensor_parallel_size=2"])
    assert code == 2 and "tensor_parallel_size must be 1" in capsys.readouterr().err


def test_a_backend_that_does_not_name_fsdp_is_refused_under_it(tmp_path, monkeypatch, request):
    from harness.policy import backends
    from harness.preflight import StartupError, check_start_up

    class OneProcess:
        @classmethod
        def from_config(cls, cfg, model, tokenizer, device, precision=None):
            return cls()

    backends.BACKENDS.add("one_process", f"{__name__}:OneProcess")
    request.addfinalizer(lambda: backends.BACKENDS.unregister("one_process"))
    monkeypatch.setitem(globals(), "OneProcess", OneProcess)
    cfg = _paper(tmp_path, "backend.name=hf")
    check_start_up(cfg, training=False)
    monkeypatch.setattr(cfg.backend, "name", "one_process")
    with pytest.raises(StartupError, match="does not run under train.strategy=fsdp"):
        check_start_up(cfg, training=False)
