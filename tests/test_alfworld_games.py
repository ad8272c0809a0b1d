"""Generated ALFWorld games: every task type is winnable by its walkthrough, not by chance; generation is
deterministic; the files are what alfworld's own loader and handcoded expert read."""
from __future__ import annotations

import json
import random

import pytest

from envs.alfworld.gamegen import TASK_TYPES, GameSize, sample_spec
from envs.alfworld.games import GAME_FILE, TRAJ_FILE, GameStore, task_id_for
from envs.base import make_benchmark
from tests.profiles import profile_config

RANDOM_EPISODES = 6


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return make_benchmark("alfworld", profile_config("tiny", "alfworld", source="generated",
                                                     cache_dir=str(tmp_path_factory.mktemp("alfworld-cache"))))


@pytest.fixture(scope="module")
def one_game_per_type(bench):
    tasks = bench.panel("eval_out").tasks[: len(TASK_TYPES)]
    assert sorted(t.task_type for t in tasks) == sorted(TASK_TYPES)
    return tasks


def play(env, task, policy):
    obs, result, steps = env.reset(task), None, 0
    while result is None or not result.done:
        result = env.step(policy(obs))
        obs, steps = result.observation, steps + 1
    return result, steps


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_walkthrough_wins_and_random_policy_mostly_does_not(bench, one_game_per_type, task_type):
    task = next(t for t in one_game_per_type if t.task_type == task_type)
    env = bench.make_env()
    expert = bench.expert(task)
    result, steps = play(env, task, expert.act)
    assert result.info["won"] and result.reward == 10.0 and result.info["task_score"] == 1.0
    assert result.info["task_type"] == task_type and steps <= 10
    rng = random.Random(0)
    random_env = type(env)(env.resolve_game, max_steps=15, translation_cache_dir=bench.translation_dir)
    wins = sum(play(random_env, task, lambda o: rng.choice(o.admissible_actions))[0].info["won"]
               for _ in range(RANDOM_EPISODES))
    assert wins <= RANDOM_EPISODES // 2, f"a random policy won {wins}/{RANDOM_EPISODES} {task_type} episodes"
    losing = play(random_env, task, lambda o: "look")[0]
    assert not losing.info["won"] and losing.reward == 0.0 and losing.info["truncated"]


def test_same_seed_same_bytes(tmp_path):
    spec_a = sample_spec(301, "look_at_obj_in_light", 7, GameSize(4, 2))
    spec_b = sample_spec(301, "look_at_obj_in_light", 7, GameSize(4, 2))
    spec_c = sample_spec(301, "look_at_obj_in_light", 8, GameSize(4, 2))
    assert spec_a == spec_b and spec_a.game_hash == spec_b.game_hash and spec_a.game_hash != spec_c.game_hash
    task_id = task_id_for(spec_a, "train")
    files = []
    for name in ("a", "b"):
        game = GameStore(tmp_path / name).ensure(spec_a, task_id)
        files.append((game.read_bytes(), (game.parent / TRAJ_FILE).read_bytes()))
    assert files[0] == files[1]
    data = json.loads(files[0][0])
    assert set(data) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
    assert data["solvable"] and data["walkthrough"] and "UNKNOWN GOAL" not in data["grammar"]


def test_game_size_knobs_shrink_the_game():
    small = sample_spec(1, "pick_heat_then_place_in_recep", 3, GameSize(max_receptacles=4, num_distractors=2))
    full = sample_spec(1, "pick_heat_then_place_in_recep", 3, GameSize())
    assert len(small.receptacles) == 4 and len(small.objects) == 1 + 2
    assert len(full.receptacles) > 20 and len(full.objects) > 20


def test_official_loader_and_handcoded_expert_accept_generated_games(bench, one_game_per_type):
    """``AlfredTWEnv.collect_game_files`` finds the games; alfworld's handcoded expert (which reads
    traj_data.json's pddl_params) solves one."""
    from alfworld.agents.environment.alfred_tw_env import AlfredExpert, AlfredExpertType, AlfredTWEnv

    task = next(t for t in one_game_per_type if t.task_type == "pick_and_place_simple")
    game = bench.game_file(task)
    root = game.parents[3]  # <root>/<split>/<task>/<trial>/game.tw-pddl
    config = {"env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2, 3, 4, 5, 6]},
              "dataset": {"eval_ood_data_path": str(root / "valid_unseen"), "num_eval_games": -1}}
    loader = AlfredTWEnv(config, train_eval="eval_out_of_distribution")
    assert str(game) in loader.game_files

    from envs.alfworld.engine import make_textworld_env

    env = AlfredExpert(make_textworld_env(), expert_type=AlfredExpertType.HANDCODED)
    env.load(str(game))
    state, done, steps = env.reset(), False, 0
    while not done and steps < 40:
        state, _, done = env.step(state["extra.expert_plan"][0])
        steps += 1
    assert state["won"], f"the handcoded expert did not solve {task.task_id} in {steps} steps"
    assert (game.parent / GAME_FILE).is_file()


def test_vector_env_plays_alfworld_games_in_workers(bench, one_game_per_type):
    """The benchmark's bound ``make_env`` travels to spawned workers; walkthroughs still win there."""
    from envs.vector import VectorEnv

    tasks = list(one_game_per_type[:2])
    experts = [bench.expert(t) for t in tasks]
    with VectorEnv(bench.make_env, num_workers=2, step_timeout_s=60) as venv:
        observations = venv.reset(tasks)
        final = [None, None]
        for _ in range(10):
            actions = [e.act(o) if f is None else None for e, o, f in zip(experts, observations, final)]
            for i, result in enumerate(venv.step(actions)):
                if result is not None:
                    observations[i] = result.observation
                    final[i] = result if result.done else None
            if all(f is not None for f in final):
                break
    assert all(f is not None and f.info["won"] and "failure_reason" not in f.info for f in final)
