"""What WebShop's text mode shows: page texts joined by `` [SEP] `` and the clickables of each page.

The observation is WebShop's ``simple`` text mode after verl-agent's ``format_obs``: the texts that follow the
instruction, each in single quotes. The admissible actions are verl-agent's ``format_avail_actions``:
``search[<your query>]`` when the page has a search bar, then ``click[<clickable>]`` for every button, product
link and option value, in page order (WebShop's ``get_available_actions``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

SUCCESS_REWARD = 10.0  # verl-agent: 10 when WebShop's score is 1, else 0
SEARCH_PLACEHOLDER = "search[<your query>]"
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "Back to Search", "Next >", "< Prev", "Buy Now"
DETAIL_PAGES = ("Description", "Features", "Reviews")
_ACTION = re.compile(r"^(search|click)\[(.*)\]$", re.DOTALL)


@dataclass(frozen=True)
class Page:
    kind: str  # "search" | "results" | "item" | "detail" | "done"
    texts: tuple[str, ...]
    clickables: tuple[str, ...]  # lower-cased, in page order
    has_search_bar: bool = False

    @property
    def text(self) -> str:
        return format_observation(self.texts)

    @property
    def admissible_actions(self) -> list[str]:
        return admissible_actions(self.has_search_bar, self.clickables)


def format_observation(texts) -> str:
    """verl-agent's ``format_obs``: each page text in single quotes, joined by `` [SEP] ``."""
    return " [SEP] ".join(f"'{t}'" for t in texts)


def admissible_actions(has_search_bar: bool, clickables) -> list[str]:
    return ([SEARCH_PLACEHOLDER] if has_search_bar else []) + [f"click[{c}]" for c in clickables]


def split_action(action: str) -> tuple[str, str] | None:
    """``search[q]`` / ``click[x]`` -> (verb, lower-cased argument); None when the action has neither form."""
    match = _ACTION.match(action.strip()) if isinstance(action, str) else None
    return (match.group(1), match.group(2).strip().lower()) if match else None


def action_error(page: Page, action: str) -> str | None:
    """Why ``action`` cannot be taken on ``page`` (None when it can). Never raises."""
    parts = split_action(action)
    if parts is None:
        return "not of the form search[...] or click[...]"
    verb, arg = parts
    if verb == "search":
        if not page.has_search_bar:
            return "this page has no search bar; click[back to search] first"
        if not arg or f"search[{arg}]" == SEARCH_PLACEHOLDER:
            return "empty search query (replace <your query> with the words to search for)"
        return None
    if arg not in page.clickables:
        return f"{arg[:60]!r} is not clickable on this page"
    return None


def step_outcome(score: float | None, steps: int, max_steps: int, error: str | None,
                 task_type: str) -> tuple[float, bool, dict]:
    """(reward, done, info) of a step; ``score`` is WebShop's score once bought (None before).

    ``info``: ``won``, ``action_valid``, ``task_type`` always; ``invalid_reason`` for an invalid action;
    ``task_score`` and ``truncated`` when the episode ends (bought, or ``max_steps`` reached: score 0).
    """
    finished = score is not None
    won = finished and score == 1.0
    done = finished or steps >= max_steps
    info = {"won": won, "action_valid": error is None, "task_type": task_type}
    if error is not None:
        info["invalid_reason"] = error
    if done:
        info["task_score"] = score if finished else 0.0
        info["truncated"] = not finished
    return (SUCCESS_REWARD if won else 0.0), done, info
