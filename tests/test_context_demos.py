"""A tiny policy warm-started on demonstrations under the teacher contexts reads them: the teacher under the
successful sibling's action list puts more probability on the right door than the student does."""
from __future__ import annotations

from envs.base import make_benchmark
from harness.policy.context_demos import context_demonstrations, pivots, play, probe
from harness.policy.source import prepare_policy
from harness.teacher_contexts import SIBLING_HEADER, SKILLS_HEADER
from tests.engine_helpers import toy_config

# the smallest game with a pivot; plain demonstrations teach both doors alike (the student stays at 1/2), the
# context ones the key's door: only a model that reads the context can do better than the student
GATES = {"horizon": 2, "pivots": 1, "choices": 2, "key_at_gates": True, "demo_pivots": "uniform",
         "train_panel_size": 200, "eval_panel_size": 12}


def _config(tmp_path, share: float):
    return toy_config(tmp_path, benchmark="gates", gates=GATES,
                      model={"tiny_hidden": 64, "tiny_layers": 2, "tiny_heads": 2, "tiny_vocab": 320,
                             "warm_start_epochs": 8, "warm_start_lr": 3e-3, "warm_start_demos": 200,
                             "warm_start_batch": 16, "warm_start_prompt_loss": 0.2, "warm_start_warmup": 0.05,
                             "warm_start_cosine": True, "warm_start_max_grad_norm": 1.0,
                             "warm_start_context_share": share},
                      rollout={"max_prompt_tokens": 128, "teacher_context_tokens": 256})


def test_context_demonstrations_place_the_teacher_context_before_the_prompt(tmp_path):
    cfg = _config(tmp_path, 0.5)
    benchmark = make_benchmark("gates", cfg.benchmark_config)
    tasks = benchmark.panel("train").tasks[:20]
    pairs = context_demonstrations(benchmark, tasks, cfg.rollout, benchmark.max_steps, 0.5)
    assert 0 < len(pairs) < 20 * benchmark.max_steps
    episode = play(benchmark, benchmark.make_env(), tasks[0], cfg.rollout, benchmark.max_steps)
    prompts = {t.prompt for t in episode.turns}
    sibling = [(p, r) for p, r in pairs if p.startswith(SIBLING_HEADER)]
    assert sibling and any(p.startswith(SKILLS_HEADER) for p, _ in pairs)
    for prompt, response in sibling:  # the action the reference took at this turn is the one demonstrated
        listed = prompt[len(SIBLING_HEADER):].split("\n\n")[0].split("\n")
        assert response.removeprefix("<action>").removesuffix("</action>") in listed
    assert any(p.endswith(tuple(prompts)) for p, _ in pairs)
    assert len(pivots(benchmark.make_env(), episode)) == GATES["pivots"]


def test_warm_started_teacher_reads_the_sibling_context(tmp_path):
    import torch

    cfg = _config(tmp_path, 0.3)
    benchmark = make_benchmark("gates", cfg.benchmark_config)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.train.cpu_threads)  # as a run does: one thread on a shared CPU
    try:
        model, tokenizer, _ = prepare_policy(cfg, benchmark, "cpu", log=lambda line: None)
    finally:
        torch.set_num_threads(threads)
    table = probe(model, tokenizer, benchmark, benchmark.panel("eval_out").tasks[:12], cfg.rollout,
                  benchmark.max_steps)
    student, sibling = (sum(table[k]) / len(table[k]) for k in ("student", "successful_sibling"))
    assert len(table["student"]) == 12 * GATES["pivots"]
    assert sibling > student + 0.05, (student, sibling)


def test_warm_start_batches_context_demonstrations_apart():
    import random

    from harness.policy.warm_start import _batches

    limits = [128] * 50 + [512] * 13
    batches = _batches(len(limits), 8, random.Random(0), limits)
    assert sorted(i for b in batches for i in b) == list(range(len(limits)))
    assert all(len({limits[i] for i in b}) == 1 for b in batches)
    plain = _batches(20, 8, random.Random(0), [128] * 20)  # one limit: the plain shuffled order, as before
    order = list(range(20))
    random.Random(0).shuffle(order)
    assert plain == [order[:8], order[8:16], order[16:]]


def test_every_teacher_context_has_its_header_in_the_cache_key():
    """harness/teacher_contexts.HEADERS feeds the tiny model's cache key: a context registered without a header
    there would change nothing in the key although the warm start demonstrates it."""
    from harness.core.registry import TEACHER_CONTEXTS
    from harness.teacher_contexts import HEADERS

    assert sorted(HEADERS) == TEACHER_CONTEXTS.available()
