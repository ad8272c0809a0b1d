"""ALFWorld env contract: malformed outputs, panels, official data tree, prompts, the engine fast paths."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from envs.alfworld.gamegen import TASK_TYPES
from envs.alfworld.official import AlfworldDataError
from envs.base import INVALID_ACTION_FEEDBACK, make_benchmark, parse_action
from tests.profiles import profile_config

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("alfworld-cache"))


@pytest.fixture(scope="module")
def bench(cache_dir):
    return make_benchmark("alfworld", profile_config("tiny", "alfworld", source="generated", cache_dir=cache_dir))


MALFORMED = {
    "no tags": "go to countertop 1",
    "empty": "",
    "10 KB junk": "<think>x</think>" + "qz#@!" * 2048,
    "non-ASCII": "<action>去 countertop 1 ✓</action>",
    "unclosed": "<action>go to countertop 1",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_output_is_invalid_and_gets_nothing_happens(bench, name):
    task = bench.panel("train").tasks[0]
    env = bench.make_env()
    obs = env.reset(task)
    parsed = parse_action(MALFORMED[name], think=bench.think)
    assert not parsed.valid
    result = env.step(parsed.action)
    assert result.observation.text == INVALID_ACTION_FEEDBACK
    assert result.info["action_valid"] is False and result.info["won"] is False and result.reward == 0.0
    assert not result.done and result.observation.admissible_actions == obs.admissible_actions
    assert result.info["task_type"] == task.task_type


def test_valid_output_steps_the_game(bench):
    task = bench.panel("train").tasks[0]
    env = bench.make_env()
    obs = env.reset(task)
    action = bench.expert(task).act(obs)
    parsed = parse_action(f"<action>{action.upper()}</action>", think=False, admissible=obs.admissible_actions)
    assert parsed.valid and parsed.action == action
    result = env.step(parsed.action)
    assert result.info["action_valid"] and result.observation.text != INVALID_ACTION_FEEDBACK


def test_episode_ends_at_max_steps(cache_dir):
    bench = make_benchmark("alfworld", profile_config("tiny", "alfworld", source="generated", cache_dir=cache_dir,
                                                      max_steps=3))
    env = bench.make_env()
    env.reset(bench.panel("train").tasks[0])
    results = [env.step("look") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].info["task_score"] == 0.0 and results[-1].info["truncated"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")


_PANEL_SCRIPT = """
import sys
from tests.profiles import profile_benchmark
b = profile_benchmark("paper", "alfworld", source="generated", cache_dir=sys.argv[1])
print(b.panel("eval_out").sha256, b.panel("train", 60).sha256, len(b.panel("eval_out")))
"""


def test_panel_hash_is_stable_across_processes(tmp_path):
    outputs = [subprocess.run([sys.executable, "-c", _PANEL_SCRIPT, str(tmp_path)], cwd=REPO, capture_output=True,
                              text=True, check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
               for seed in (1, 2)]
    assert outputs[0] == outputs[1]
    eval_hash, _, n = outputs[0].split()
    assert int(n) == 134
    bench = make_benchmark("alfworld", profile_config("paper", "alfworld", source="generated", cache_dir=str(tmp_path)))
    panel = bench.panel("eval_out")
    assert panel.sha256 == eval_hash
    assert {t.task_type for t in panel.tasks[:6]} == set(TASK_TYPES)
    assert all(t.task_id.startswith("valid_unseen/") for t in panel.tasks)
    train_ids = set(bench.panel("train", 60).task_ids)
    assert not train_ids & set(bench.panel("eval_in", 30).task_ids)


def test_eval_out_scenes_never_appear_in_train(bench):
    scene = lambda t: int(t.task_id.split("/")[1].rsplit("-", 1)[1])  # noqa: E731
    assert not {scene(t) for t in bench.panel("train").tasks} & {scene(t) for t in bench.panel("eval_out").tasks}


def _build_official_tree(bench, root: Path) -> None:
    """A tiny json_2.1.1 tree: the generator's games copied into train / valid_seen / valid_unseen."""
    for split in ("train", "eval_in", "eval_out"):
        for task in bench.panel(split, 3).tasks:
            src = bench.game_file(task).parent
            dst = root / "json_2.1.1" / task.task_id
            dst.mkdir(parents=True)
            for f in src.iterdir():
                (dst / f.name).write_bytes(f.read_bytes())


def test_official_data_path(bench, tmp_path, monkeypatch):
    _build_official_tree(bench, tmp_path)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    official = make_benchmark("alfworld", profile_config("tiny", "alfworld", cache_dir=str(tmp_path / "cache")))
    assert official.settings.source == "official"
    panel = official.panel("eval_out")
    assert len(panel) == 3 and all(t.task_id.startswith("valid_unseen/") for t in panel.tasks)
    assert set(panel.task_ids) == set(bench.panel("eval_out", 3).task_ids)
    task = panel.tasks[0]
    env = official.make_env()
    obs = env.reset(task)
    expert, result = official.expert(task), None
    while result is None or not result.done:
        result = env.step(expert.act(obs))
        obs = result.observation
    assert result.info["won"]
    unsolvable = tmp_path / "json_2.1.1" / panel.tasks[1].task_id / "game.tw-pddl"
    unsolvable.write_text(json.dumps({**json.loads(unsolvable.read_text()), "solvable": False}))
    fresh = make_benchmark("alfworld", profile_config("tiny", "alfworld", data_path=str(tmp_path / "json_2.1.1")))
    assert panel.tasks[1].task_id not in fresh.panel("eval_out").task_ids  # as AlfredTWEnv skips it


def test_missing_or_partial_data_folder_says_what_and_how(bench, tmp_path):
    with pytest.raises(AlfworldDataError, match=r"does not exist.*json_2\.1\.1.*alfworld-download"):
        make_benchmark("alfworld", profile_config("tiny", "alfworld", data_path=str(tmp_path / "nowhere")))
    _build_official_tree(bench, tmp_path)
    for game in (tmp_path / "json_2.1.1" / "valid_unseen").glob("*/*/game.tw-pddl"):
        game.unlink()
    (tmp_path / "json_2.1.1" / "valid_seen").rename(tmp_path / "elsewhere")
    with pytest.raises(AlfworldDataError) as err:
        make_benchmark("alfworld", profile_config("tiny", "alfworld", data_path=str(tmp_path)))
    message = str(err.value)
    assert "valid_seen" in message and "valid_unseen" in message and "train" not in message.split("Expected")[0]
    assert "alfworld-download" in message and "source: generated" in message


def test_prompt_matches_verl_agent(bench):
    task = bench.panel("train").tasks[0]
    env = bench.make_env()
    obs = env.reset(task)
    text = bench.task_description(task, obs)
    assert text and text in obs.text and "Your task is to" not in text
    first = bench.format_prompt(text, [], obs, 0, 2)
    assert obs.text in first and "'help'" not in first and "<think>" not in first
    history = [(obs.text, "look"), ("obs two", "inventory"), ("obs three", "look")]
    later = bench.format_prompt(text, history, obs, 3, 2)
    assert "Prior to this step, you have already taken 3 step(s)" in later and "most recent 2 observaitons" in later
    assert "[Observation 2: 'obs two', Action 2: 'inventory']" in later and "Observation 1:" not in later
    assert "You are now at step 4" in later and f"Your task is to: {text}" in later
    thinking = make_benchmark("alfworld", profile_config("tiny", "alfworld", source="generated"), think=True)
    assert "<think> </think>" in thinking.format_prompt(text, [], obs, 0, 2)
    assert thinking.template.sha256 != bench.template.sha256


def test_fast_paths_give_identical_text(bench, monkeypatch):
    """The engine speed-ups (envs/alfworld/fastpath.py, the game loading in engine.py) change no observation or
    admissible list: the same play on TextWorld's own code gives the same transcript."""
    from textworld.envs import PddlEnv

    from envs.alfworld import engine, fastpath

    tasks = bench.panel("eval_out").tasks[:3]

    def transcript():
        """Each task: a few seeded random admissible actions, then its walkthrough to the win."""
        env, rng, out = bench.make_env(), random.Random(0), []
        for task in tasks:
            obs = env.reset(task)
            out.append((obs.text, obs.admissible_actions))
            for _ in range(6):
                obs = env.step(rng.choice(obs.admissible_actions)).observation
                out.append((obs.text, obs.admissible_actions))
            env.reset(task)
            for action in ["look", "inventory", *bench.expert(task).walkthrough]:
                result = env.step(action)
                out.append((result.observation.text, result.observation.admissible_actions))
            assert result.info["won"]
        return out

    fast = transcript()
    fastpath.uninstall()
    try:
        monkeypatch.setattr(fastpath, "install", lambda *_: None)
        monkeypatch.setattr(engine._CachedLogicPddlEnv, "load", PddlEnv.load)
        slow = transcript()
    finally:
        monkeypatch.undo()
        fastpath.install()
    assert fast == slow


def test_pickled_memo_computes_once_and_survives_a_torn_file(tmp_path):
    from envs.alfworld.fastpath import PickledMemo

    calls = []

    def compute():
        calls.append(1)
        return {"parsed": len(calls)}

    first = PickledMemo("test", max_in_memory=1)
    first.folder = tmp_path
    assert first.get(("a", "b"), compute) == {"parsed": 1}
    assert first.get(("a", "b"), compute) == {"parsed": 1} and len(calls) == 1  # memory hit
    fresh = PickledMemo("test", max_in_memory=1)
    fresh.folder = tmp_path
    assert fresh.get(("a", "b"), compute) == {"parsed": 1} and fresh.misses == 0  # disk hit, another process
    other_kind = PickledMemo("other", max_in_memory=1)
    other_kind.folder = tmp_path
    assert other_kind.get(("a", "b"), compute) == {"parsed": 2}  # kinds never share entries
    for pickled in tmp_path.rglob("*.pkl"):
        pickled.write_bytes(b"torn")
    torn = PickledMemo("test", max_in_memory=1)
    torn.folder = tmp_path
    assert torn.get(("a", "b"), compute) == {"parsed": 3} and torn.misses == 1  # recomputed, not fatal
