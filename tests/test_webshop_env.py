"""The offline WebShop: panels, search, pages and actions, expert and random policies, profiles."""
import random
import subprocess
import sys
from pathlib import Path

import pytest

from envs.base import Task, make_benchmark
from envs.webshop import WebshopBenchmark
from envs.webshop.catalogue import CatalogueError, check_product, product_type_of
from tests.profiles import profile_benchmark, profile_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", params=["tiny", "smoke", "paper"])
def bench(request) -> WebshopBenchmark:
    return profile_benchmark(request.param, "webshop")


@pytest.fixture(scope="module")
def tiny() -> WebshopBenchmark:
    return make_benchmark("webshop", profile_config("tiny", "webshop"))


def play(bench, task, policy, max_steps=None):
    """Run one episode; returns (last StepResult, steps, admissible-list lengths)."""
    env = bench.make_env()
    obs = env.reset(task)
    sizes = [len(obs.admissible_actions)]
    for step in range(max_steps or bench.max_steps):
        result = env.step(policy(obs))
        obs = result.observation
        sizes.append(len(obs.admissible_actions))
        if result.done:
            return result, step + 1, sizes
    raise AssertionError("the env did not end the episode at max_steps")


def test_registered_and_splits(bench):
    assert isinstance(bench, WebshopBenchmark)
    eval_in, eval_out, train = bench.panel("eval_in"), bench.panel("eval_out"), bench.panel("train")
    # one WebShop eval pool: eval_in and eval_out hold the same goals
    assert eval_in.task_ids == eval_out.task_ids and eval_in.sha256 != eval_out.sha256
    assert not set(train.task_ids) & set(eval_out.task_ids)
    assert len(set(train.task_ids)) == len(train)
    assert set(t.task_type for t in train.tasks) == set(WebshopBenchmark.task_types)
    assert bench.panel("eval_out", 7).task_ids == eval_out.task_ids[:7]


def test_profile_panel_sizes():
    sizes = {p: len(make_benchmark("webshop", profile_config(p, "webshop")).panel("eval_out"))
             for p in ("tiny", "paper")}
    assert sizes == {"tiny": 50, "paper": 500}
    custom = make_benchmark("webshop", profile_config("tiny", "webshop", eval_panel_size=20, train_panel_size=30))
    assert (len(custom.panel("eval_in")), len(custom.panel("train"))) == (20, 30)


def test_bad_split_and_size_are_clear_errors(tiny):
    with pytest.raises(ValueError, match="splits"):
        tiny.panel("test")
    with pytest.raises(ValueError, match="outside 1..50"):
        tiny.panel("eval_out", 51)
    with pytest.raises(ValueError, match="eval pool"):
        WebshopBenchmark(profile_config("tiny", "webshop", eval_panel_size=5000))


def test_panel_hash_is_stable_across_processes(tiny):
    code = ("from tests.profiles import profile_benchmark; "
            "print(profile_benchmark('tiny', 'webshop').panel('train').sha256)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == tiny.panel("train").sha256


def test_sizing_changes_task_ids():
    a = make_benchmark("webshop", profile_config("tiny", "webshop")).panel("eval_out")
    b = make_benchmark("webshop", profile_config("tiny", "webshop", max_option_groups=1)).panel("eval_out")
    assert a.task_ids[0].split("-")[1] != b.task_ids[0].split("-")[1]


def test_search_ranks_goal_product_top10(bench):
    for task in bench.panel("eval_out", 50).tasks:
        goal = task.payload
        assert goal.asin in bench.index.search(goal.search_query, 10), goal.search_query


def test_search_over_whole_paper_eval_pool():
    bench = make_benchmark("webshop", profile_config("paper", "webshop"))
    ranks = []
    for task in bench.panel("eval_out").tasks:
        found = bench.index.search(task.payload.search_query, 50)
        ranks.append(found.index(task.payload.asin) if task.payload.asin in found else 99)
    assert sum(r < 10 for r in ranks) / len(ranks) >= 0.95
    assert max(ranks) < 50  # always within the 50 results the expert can page through


def test_expert_succeeds(bench):
    tasks = bench.panel("eval_out", 50).tasks
    wins = 0
    for task in tasks:
        expert = bench.expert(task)
        result, _, _ = play(bench, task, expert.act)
        wins += result.info["won"]
        assert result.reward == (10.0 if result.info["won"] else 0.0)
        assert result.info["task_type"] == task.task_type
    assert wins / len(tasks) >= 0.95


def test_random_admissible_policy_rarely_succeeds(bench):
    rng = random.Random(0)
    tasks = bench.panel("eval_out", min(100, len(bench.panel("eval_out")))).tasks
    wins = 0
    for task in tasks:
        def policy(obs, query=task.payload.search_query):
            action = rng.choice(obs.admissible_actions)
            # a generous random policy: it searches the goal's own words
            return f"search[{query}]" if action.startswith("search[") else action
        result, _, _ = play(bench, task, policy)
        wins += result.info["won"]
        assert 0.0 <= result.info["task_score"] <= 1.0
    assert wins / len(tasks) < 0.10


def test_tiny_episodes_are_short_with_short_lists(tiny):
    lengths, widest = [], 0
    for task in tiny.panel("eval_out").tasks:
        _, steps, sizes = play(tiny, task, tiny.expert(task).act)
        lengths.append(steps)
        widest = max(widest, *sizes)
    assert 4 <= sum(lengths) / len(lengths) <= 6 and max(lengths) <= 6
    assert widest <= 9
    assert tiny.think is False and "<think>" not in tiny.template.first


def test_pages_and_admissible_format(tiny):
    task = tiny.panel("eval_out").tasks[0]
    env = tiny.make_env()
    obs = env.reset(task)
    assert obs.text == "'Search'" and obs.admissible_actions == ["search[<your query>]"]
    assert tiny.task_description(task, obs) == task.payload.instruction_text
    obs = env.step(f"search[{task.payload.search_query}]").observation
    assert obs.info["page"] == "results" and obs.text.startswith("'Back to Search' [SEP] 'Page 1 (Total results: ")
    assert obs.admissible_actions[0] == "click[back to search]"
    assert f"click[{task.payload.asin.lower()}]" in obs.admissible_actions
    obs = env.step(f"click[{task.payload.asin.lower()}]").observation
    assert obs.info["page"] == "item" and "click[buy now]" in obs.admissible_actions
    assert "'Buy Now'" in obs.text and f"'Price: ${env.catalogue.by_asin[task.payload.asin].price:.2f}'" in obs.text


@pytest.mark.parametrize("junk", ["click[nonexistent]", "search[]", "search[<your query>]", "buy now", "",
                                  "x" * 10240, "click[", "search[shoes", "click[b0" + "z" * 8 + "]"])
def test_malformed_actions_leave_the_page_unchanged(tiny, junk):
    task = tiny.panel("eval_out").tasks[1]
    env = tiny.make_env()
    for prefix in ([], [f"search[{task.payload.search_query}]"]):
        obs = env.reset(task)
        for action in prefix:
            obs = env.step(action).observation
        result = env.step(junk)
        assert result.info["action_valid"] is False and "invalid_reason" in result.info
        assert result.observation.text == obs.text
        assert result.observation.admissible_actions == obs.admissible_actions
        assert (result.reward, result.done, result.info["won"]) == (0.0, False, False)


def test_search_is_only_valid_on_the_search_page(tiny):
    task = tiny.panel("eval_out").tasks[0]
    env = tiny.make_env()
    env.reset(task)
    env.step(f"search[{task.payload.search_query}]")
    assert env.step("search[anything]").info["action_valid"] is False


def test_navigation_and_step_limit(tiny):
    task = tiny.panel("eval_out").tasks[2]
    env = tiny.make_env()
    env.reset(task)
    results = env.step(f"search[{task.payload.search_query}]").observation
    env.step(f"click[{task.payload.asin.lower()}]")
    back = env.step("click[< prev]").observation
    assert back.text == results.text
    assert env.step("click[back to search]").observation.text == "'Search'"
    last = None
    for _ in range(tiny.max_steps - 4):
        last = env.step("click[nothing]")
    assert last.done and last.info["truncated"] and last.info["task_score"] == 0.0 and not last.info["won"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("click[back to search]")


def test_detail_pages_in_paper_semantics():
    bench = make_benchmark("webshop", profile_config("paper", "webshop"))
    task = bench.panel("eval_out").tasks[0]
    env = bench.make_env()
    assert env.reset(task).admissible_actions == ["search[<your query>]", "click[search]"]
    env.step(f"search[{task.payload.search_query}]")
    item = env.step(f"click[{task.payload.asin.lower()}]").observation
    assert item.admissible_actions[:6] == ["click[back to search]", "click[< prev]", "click[description]",
                                           "click[features]", "click[reviews]", "click[buy now]"]
    features = env.step("click[features]").observation
    assert features.info["page"] == "detail"
    assert env.step("click[< prev]").observation.text == item.text


def test_prompt_first_turn_and_history(tiny):
    task = tiny.panel("eval_out").tasks[0]
    env = tiny.make_env()
    obs = env.reset(task)
    text = tiny.task_description(task, obs)
    first = tiny.format_prompt(text, [], obs, 0, 2)
    assert f"Your task is to: {text}." in first and "Your current observation is: 'Search'." in first
    assert "[\n'search[<your query>]',\n]." in first and "<action> </action>" in first
    history = [(obs.text, f"search[{task.payload.search_query}]")]
    obs2 = env.step(history[0][1]).observation
    later = tiny.format_prompt(text, history, obs2, 1, 2)
    assert "Prior to this step, you have already taken 1 step(s)." in later
    assert f"[Observation 1: ''Search'', Action 1: 'search[{task.payload.search_query}]']" in later
    assert "You are now at step 2" in later
    assert tiny.format_prompt(text, history, obs2, 1, 0).startswith(first.split("Your current")[0])


def test_think_variant_is_verl_agents(bench):
    paper = WebshopBenchmark(profile_config("tiny", "webshop"), think=True)
    assert "MUST be enclosed within <think> </think> tags" in paper.template.first
    assert paper.template.sha256 != WebshopBenchmark(profile_config("tiny", "webshop"), think=False).template.sha256
    assert profile_benchmark("paper", "webshop").think and not profile_benchmark("tiny", "webshop").think


def test_reset_rejects_a_foreign_task(tiny):
    with pytest.raises(TypeError, match="panel"):
        tiny.make_env().reset(Task("x", "fashion", "train", payload="not a goal"))


def test_catalogue_checker_catches_text_leaks(tiny):
    product = tiny.catalogue.products[0]
    ptype = product_type_of(product)
    lacking = next(a for a in ptype.attributes if a not in product.attributes)
    leaky = product.__class__(**{**product.__dict__, "description": f"now with {lacking}"})
    with pytest.raises(CatalogueError, match="occurs in its text"):
        check_product(leaky, ptype)


def test_require_admissible_accepts_a_typed_search(tiny):
    """parse_action(admissible=...) treats WebShop's search[<your query>] as 'any query'."""
    from envs.base import parse_action

    obs = tiny.make_env().reset(tiny.panel("eval_out").tasks[0])
    assert parse_action("<action>search[navy shirt]</action>", think=False, admissible=obs.admissible_actions).valid
    for bad in ("search[<your query>]", "search[]", "click[search]"):
        assert not parse_action(f"<action>{bad}</action>", think=False, admissible=obs.admissible_actions).valid
