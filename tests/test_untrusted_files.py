"""A run folder or a cache on a shared filesystem is not a trusted input: a checkpoint or an ALFWorld cache file that
carries code is refused with a named error, and nothing it names runs; what the harness itself writes still loads."""
from __future__ import annotations

import os
import pickle

import pytest
import torch

from harness.records.run_state import UnsafeCheckpointError, load_checkpoint


class RunsCode:
    """Unpickling this calls os.system: what a crafted file in a results folder would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def written_like_the_harness(tmp_path):
    """A checkpoint as harness/engine/checkpoint.py writes it: step, weights, AdamW's state after a step."""
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    state = {"next_step": 3, "elapsed_s": 1.5, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "protocol_sha256": "ab" * 32}
    torch.save(state, tmp_path / "checkpoint.pt")
    return state


def test_a_checkpoint_the_harness_writes_loads_weights_only(tmp_path):
    state = written_like_the_harness(tmp_path)
    loaded = load_checkpoint(tmp_path / "checkpoint.pt")
    assert loaded["next_step"] == 3 and loaded["protocol_sha256"] == state["protocol_sha256"]
    assert torch.equal(loaded["model"]["weight"], state["model"]["weight"])
    assert loaded["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    assert torch.equal(loaded["optimizer"]["state"][0]["exp_avg"], state["optimizer"]["state"][0]["exp_avg"])


def test_a_checkpoint_that_carries_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    state = written_like_the_harness(tmp_path)
    torch.save({**state, "payload": RunsCode(marker)}, tmp_path / "checkpoint.pt")
    with pytest.raises(UnsafeCheckpointError, match=r"is refused: it holds Python objects other than tensors.*"
                                                    r"system.*Delete it"):
        load_checkpoint(tmp_path / "checkpoint.pt")
    assert not marker.exists()


def test_an_alfworld_cache_file_that_carries_code_is_refused(tmp_path):
    fastpath = pytest.importorskip("envs.alfworld.fastpath")  # needs textworld, as the fast path itself does
    from textworld.logic import Proposition, Variable

    memo = fastpath.PickledMemo("kind", max_in_memory=4)
    memo.folder = tmp_path / "cache"
    facts = [Proposition("at", [Variable("apple", "o"), Variable("table", "r")])]
    assert memo.get(("a",), lambda: facts) == facts
    memo._memory.clear()
    assert memo.get(("a",), lambda: pytest.fail("recomputed")) == facts  # read back from its file
    [path] = list((tmp_path / "cache").rglob("*.pkl"))
    marker = tmp_path / "ran"
    path.write_bytes(pickle.dumps(RunsCode(marker)))
    memo._memory.clear()
    with pytest.raises(fastpath.UnsafeCacheError, match=r"is refused: it names posix.system.*Delete the cache"):
        memo.get(("a",), lambda: facts)
    assert not marker.exists()
    path.write_bytes(b"\x80\x05torn")  # a torn file is still recomputed, not an error
    assert memo.get(("a",), lambda: facts) == facts
