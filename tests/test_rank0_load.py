"""FSDP start-up loads the weights on rank 0 alone (harness/engine/distributed.py: shard), measured by
perf/rank0_load.py on 2 gloo ranks: rank 1 builds on the meta device and its shards equal the folder's
weights exactly; the slow variant (~200M parameters) shows in RSS that rank 1 never held a full copy."""
from __future__ import annotations

import pytest

from perf.rank0_load import measure


def test_rank_1_builds_on_meta_and_receives_exact_shards():
    result = measure(hidden=64, layers=2)
    first, second = result["ranks"]
    assert not first["built_on_meta"] and second["built_on_meta"]
    assert first["max_abs_diff_to_folder"] == 0.0  # the full tensors gathered from both ranks' shards
    assert first["local_parameters"] + second["local_parameters"] == first["parameters"]


@pytest.mark.slow
def test_rank_1_never_holds_a_full_copy_of_a_200m_model():
    result = measure(hidden=1024, layers=12)
    print(result)
    assert result["parameters"] > 190e6
    assert result["ok"], result
    assert result["gap_mib"] >= result["fp32_mib"]  # rank 0 held the model; rank 1 only its rows of each tensor
