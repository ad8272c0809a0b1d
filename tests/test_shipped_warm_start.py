"""Shipped warm starts (harness/policy/shipped.py): copied after a hash check, a tampered file refused, a rebuild
compared with the shipped weights; and the default profile's warm start is shipped."""
from __future__ import annotations

import json

import pytest

from harness.policy import shipped


def fake_cache(folder, weights=b"weights"):
    folder.mkdir(parents=True)
    (folder / shipped.WEIGHTS).write_bytes(weights)
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def shipped_root(tmp_path, monkeypatch):
    root = tmp_path / "config" / "warm_starts"
    monkeypatch.setattr(shipped, "SHIPPED_ROOT", root)
    return root


def test_ship_then_install_copies_the_same_files(tmp_path, shipped_root):
    built = fake_cache(tmp_path / "cache" / "tiny-gates-abc")
    shipped.ship(built, "python -m harness build-model --config config/cpu.yaml", log=lambda _: None)
    manifest = json.loads((shipped_root / "tiny-gates-abc" / shipped.MANIFEST).read_text())
    assert set(manifest["sha256"]) == {shipped.WEIGHTS, "config.json"} and "build-model" in manifest["command"]
    fresh = tmp_path / "other-cache" / "tiny-gates-abc"
    said = []
    assert shipped.install_shipped(fresh, log=said.append)
    assert (fresh / shipped.WEIGHTS).read_bytes() == b"weights" and "not rebuilt" in said[-1]
    assert not shipped.install_shipped(tmp_path / "cache" / "tiny-gates-other", log=said.append)


def test_a_tampered_shipped_file_is_refused(tmp_path, shipped_root):
    shipped.ship(fake_cache(tmp_path / "cache" / "tiny-x"), "cmd", log=lambda _: None)
    (shipped_root / "tiny-x" / shipped.WEIGHTS).write_bytes(b"other")
    with pytest.raises(shipped.ShippedModelError, match=r"model.safetensors.*git checkout"):
        shipped.verify(shipped_root / "tiny-x", log=lambda _: None)
    with pytest.raises(shipped.ShippedModelError):
        shipped.install_shipped(tmp_path / "fresh" / "tiny-x", log=lambda _: None)


def test_a_rebuild_says_whether_it_matches(tmp_path, shipped_root):
    shipped.ship(fake_cache(tmp_path / "cache" / "tiny-y"), "cmd", log=lambda _: None)
    said = []
    assert shipped.compare_rebuilt(fake_cache(tmp_path / "same" / "tiny-y"), log=said.append)
    assert not shipped.compare_rebuilt(fake_cache(tmp_path / "diff" / "tiny-y", b"w2"), log=said.append)
    assert "identical" in said[0] and "differs from the shipped" in said[1] and "--ship" in said[1]
    assert shipped.compare_rebuilt(fake_cache(tmp_path / "none" / "tiny-z"), log=said.append) is None


def test_the_default_profile_starts_from_a_shipped_warm_start():
    from pathlib import Path

    from harness.config import load_config

    folder = Path(load_config("config/cpu.yaml").model.source)
    assert folder.parent == Path("config/warm_starts"), "config/cpu.yaml: model.source names a shipped warm start"
    assert shipped.verify(folder, log=lambda _: None) == json.loads((folder / shipped.MANIFEST).read_text())["sha256"]
    assert (folder / "README.md").exists()  # the command, the hash and its step-0 success
