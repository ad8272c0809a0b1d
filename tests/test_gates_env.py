"""Gates: deterministic generation, disjoint panels, an expert that always wins, a random policy far below it,
malformed actions, the format expert of the warm start, and one RL step of the engine on it."""
from __future__ import annotations

import pytest

from envs.base import make_benchmark, parse_action
from envs.gates import GatesBenchmark, GatesConfig
from envs.gates.__main__ import RandomPolicy, SampledTargets, win_rate
from envs.gates.tasks import Gate, Hall


def small(**options) -> GatesBenchmark:
    return GatesBenchmark(GatesConfig(train_panel_size=300, eval_panel_size=200, **options))


def test_generator_is_deterministic_and_ignores_the_run_seed():
    one, two = small(), GatesBenchmark(GatesConfig(train_panel_size=300, eval_panel_size=200), seed=7)
    for split in ("train", "eval_in", "eval_out"):
        assert one.panel(split).sha256 == two.panel(split).sha256
        assert [t.payload for t in one.panel(split).tasks] == [t.payload for t in two.panel(split).tasks]
    assert small(horizon=5).panel("train").sha256 != one.panel("train").sha256  # ids carry the generator settings


def test_panels_are_disjoint_and_layouts_follow_the_knobs():
    bench = small(horizon=5, pivots=3, choices=3)
    signatures = {s: {t.payload.signature for t in bench.panel(s).tasks} for s in bench.splits}
    assert all(len(v) == len(bench.panel(s)) for s, v in signatures.items())  # no duplicates inside a split
    assert not signatures["train"] & signatures["eval_in"] and not signatures["train"] & signatures["eval_out"]
    assert not signatures["eval_in"] & signatures["eval_out"]
    for task in bench.panel("train").tasks:
        cells = task.payload.cells
        gates = [c for c in cells if isinstance(c, Gate)]
        assert len(cells) == 8 and len(gates) == 3 and isinstance(cells[0], Hall)
        assert all(len(g.doors) == 3 and task.payload.key in g.doors for g in gates)


@pytest.mark.parametrize("options", [{}, {"horizon": 10, "pivots": 4, "choices": 3}, {"horizon": 1, "pivots": 1}])
def test_expert_wins_every_task_and_random_play_is_far_below(options):
    bench = small(**options)
    for split in bench.splits:
        assert win_rate(bench, bench.expert, split) == 1.0
    chance = (1 / bench.config.choices) ** bench.config.pivots
    random_rate = win_rate(bench, lambda t: RandomPolicy(t.task_id))
    # uniform play wins a gate with 1/choices and also loses steps to wrong turns: at most the gates' chance
    assert random_rate <= chance + 0.05 and random_rate < 0.4


def test_default_random_policy_rate_is_the_stated_one():
    bench = GatesBenchmark(GatesConfig(horizon=4, pivots=2, choices=2))  # the cpu profile's task
    assert win_rate(bench, lambda t: RandomPolicy(t.task_id)) == pytest.approx(0.138, abs=0.001)  # README: 13.8%
    format_expert = win_rate(bench, lambda t: SampledTargets(bench.demonstrator(t), t.task_id))
    assert format_expert == pytest.approx(0.25, abs=0.05)  # the warm start's target policy: gates at chance


def test_warm_start_demonstrations_teach_every_door_and_the_right_turns():
    from types import SimpleNamespace

    from harness.policy.source import demonstrations

    bench = small()
    tasks = bench.panel("train").tasks[:20]
    pairs = demonstrations(bench, tasks, SimpleNamespace(history_length=0, think=False), bench.max_steps)
    cells = sum(len(t.payload.cells) for t in tasks)
    gates = sum(isinstance(c, Gate) for t in tasks for c in t.payload.cells)
    assert len(pairs) == cells + gates * (bench.config.choices - 1)  # full corridors, every door at every gate
    for prompt, response in pairs:
        now = prompt.split("now: ", 1)[1].split("\n", 1)[0]
        if now.startswith("hall"):
            assert response == f"<action>go {now.rstrip('.').rsplit(' ', 1)[1]}</action>"
    expert_only = GatesBenchmark(GatesConfig(train_panel_size=300, eval_panel_size=200, demo_pivots="expert"))
    assert len(demonstrations(expert_only, tasks, SimpleNamespace(history_length=0, think=False), 8)) == cells
    leaning = GatesBenchmark(GatesConfig(train_panel_size=300, eval_panel_size=200, demo_pivots="leaning"))
    leaning_pairs = demonstrations(leaning, tasks, SimpleNamespace(history_length=0, think=False), 8)
    assert len(leaning_pairs) == cells + gates * bench.config.choices  # every door, and the key's twice


def test_malformed_and_inadmissible_actions_end_the_episode_as_invalid():
    bench = small()
    env = bench.make_env()
    task = bench.panel("train").tasks[0]
    for action in ("", "fly away", "open", parse_action("no tags at all", think=False).action):
        env.reset(task)
        result = env.step(action)
        assert result.done and not result.info["won"] and not result.info["action_valid"]
        assert result.info["task_score"] == 0.0 and result.reward == 0.0
    obs = env.reset(task)
    wrong = "go left" if "right" in obs.text else "go right"
    result = env.step(wrong)  # a wrong turn in a hall is valid and costs only the step
    assert not result.done and result.info["action_valid"] and result.observation.text.startswith("a wall.")
    assert bench.expert(task).act(result.observation) != wrong


def test_a_wrong_door_sinks_the_episode():
    bench = small()
    env = bench.make_env()
    task = bench.panel("train").tasks[0]
    obs, expert = env.reset(task), bench.expert(task)
    while not obs.text.startswith("gate"):
        obs = env.step(expert.act(obs)).observation
    wrong = next(a for a in obs.admissible_actions if a != f"open {task.payload.key}")
    result = env.step(wrong)
    assert result.done and not result.info["won"] and result.info["action_valid"]


def test_prompt_is_short_and_names_the_key_and_the_actions():
    bench = make_benchmark("gates", GatesConfig())
    task = bench.panel("eval_out").tasks[0]
    obs = bench.make_env().reset(task)
    prompt = bench.format_prompt(bench.task_description(task, obs), [], obs, 0, 0)
    assert task.payload.key in prompt and all(a in prompt for a in obs.admissible_actions)
    assert len(prompt) < 200
    with_history = bench.format_prompt("t", [("hall 1: a sign points left.", "go left")], obs, 1, 1)
    assert "before: hall 1: a sign points left. -> go left" in with_history


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="gates.choices"):
        GatesBenchmark(GatesConfig(choices=9))
    with pytest.raises(ValueError, match="gates.pivots"):
        GatesBenchmark(GatesConfig(pivots=0))
    with pytest.raises(ValueError, match="panel size"):
        small().panel("eval_out", 201)


def play_labels(bench, task, actions):
    """(labels, won, final observation) of playing ``actions`` on ``task`` until the episode ends."""
    env, labels = bench.make_env(), []
    env.reset(task)
    for action in actions:
        result = env.step(action)
        labels.append(result.info["credit_label"])
        if result.done:
            return labels, result.info["won"], result.observation.text
    raise AssertionError("the episode did not end")


def env_after(bench, task, actions: list[str]):
    """A fresh env of ``task`` after ``actions``."""
    env = bench.make_env()
    env.reset(task)
    for action in actions:
        env.step(action)
    return env


def scripted(task, wrong_at: int | None = None) -> list[str]:
    """The expert's actions through ``task``'s cells, the first non-key door at cell ``wrong_at``."""
    layout, actions = task.payload, []
    for i, cell in enumerate(layout.cells):
        if isinstance(cell, Hall):
            actions.append(f"go {cell.sign}")
        else:
            wrong = next(c for c in cell.doors if c != layout.key)
            actions.append(f"open {wrong if i == wrong_at else layout.key}")
    return actions


def test_decoys_look_like_gates_and_are_neutral():
    bench = small(horizon=3, pivots=2, decoys=3)
    task = bench.panel("train").tasks[0]
    cells = task.payload.cells
    assert sum(isinstance(c, Gate) and c.decoy for c in cells) == 3 and sum(isinstance(c, Gate) for c in cells) == 5
    decoy = next(i for i, c in enumerate(cells) if isinstance(c, Gate) and c.decoy)
    labels, won, _ = play_labels(bench, task, scripted(task, wrong_at=decoy))  # a wrong door at a decoy is safe
    assert won and labels == ["neutral" if isinstance(c, Gate) and c.decoy else "correct" for c in cells]
    env = bench.make_env()
    shown = [env.reset(task).text]
    for action in scripted(task)[:-1]:
        shown.append(env.step(action).observation.text)
    assert all(shown[i].startswith("gate") for i, c in enumerate(cells) if isinstance(c, Gate))  # no decoy mark


def test_a_delayed_alarm_labels_the_wrong_door_fatal_and_what_follows_neutral():
    bench = small(horizon=4, pivots=2, alarm_delay=2)
    first_gate = {t: next(i for i, c in enumerate(t.payload.cells) if isinstance(c, Gate)) for t in
                  bench.panel("train").tasks}
    task = next(t for t, i in first_gate.items() if i + 3 < len(t.payload.cells))  # room for the whole delay
    first_gate = first_gate[task]
    labels, won, text = play_labels(bench, task, scripted(task, wrong_at=first_gate))
    assert not won and labels == ["correct"] * first_gate + ["fatal", "neutral", "neutral"]
    assert text.startswith("the alarm catches up")
    before = scripted(task)[:first_gate]
    key, other = scripted(task)[first_gate], scripted(task, wrong_at=first_gate)[first_gate]
    right = env_after(bench, task, before).step(key).observation.text
    assert right == env_after(bench, task, before).step(other).observation.text  # nothing shows the wrong door


def test_an_alarm_longer_than_the_corridor_ends_at_the_exit():
    bench = small(horizon=4, pivots=2, decoys=2, alarm_delay=99)
    task = bench.panel("train").tasks[1]
    first_gate = next(i for i, c in enumerate(task.payload.cells) if isinstance(c, Gate) and not c.decoy)
    labels, won, text = play_labels(bench, task, scripted(task, wrong_at=first_gate))
    assert not won and len(labels) == len(task.payload.cells) and "exit" in text
    assert labels[first_gate] == "fatal" and set(labels[first_gate + 1:]) <= {"neutral"}


def test_random_play_rarely_loses_on_its_last_turn_with_a_delayed_alarm():
    """The issue this design answers: with the alarm at once, the fatal turn is always the last (so recency finds
    it); delayed to the exit, it is the last only when the last real gate's door was the first wrong one."""
    from envs.gates.__main__ import fatal_last_share, play

    at_once = small(horizon=4, pivots=3, decoys=4)
    share, lost = fatal_last_share(play(at_once, lambda t: RandomPolicy(t.task_id)))
    assert share == 1.0 and lost > 50
    delayed = small(horizon=4, pivots=3, decoys=4, alarm_delay=99)
    share, lost = fatal_last_share(play(delayed, lambda t: RandomPolicy(t.task_id)))
    assert share < 0.2 and lost > 50


def test_no_decoys_no_delay_keeps_the_old_task():
    """Corridors without decoys keep their task ids and layouts: both hashes as measured at commit 3ca4372, before
    decoys existed."""
    import hashlib

    tasks = small(horizon=5, pivots=3).panel("train")
    assert tasks.sha256 == "788f210bfa75c354bd94bb6dbeeb0483a7bc3240a9b95419fd84bb89ad3444b7"
    layouts = "\n".join(t.payload.signature for t in tasks.tasks).encode()
    assert hashlib.sha256(layouts).hexdigest() == "f651254bfd08ac120b20a3eeb9e846f3f3d430fe30c05bfae541e5b36c9d4bea"
