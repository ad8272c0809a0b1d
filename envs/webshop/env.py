"""The offline WebShop text environment: search page -> results -> item (options, details) -> buy.

Transitions follow WebShop's ``SimServer.receive``: ``search[q]`` from the search page lists the BM25 results
``results_per_page`` at a time (``next >`` / ``< prev``); a product link opens its item page; an option value
selects it (one per group, the last click wins); ``< prev`` goes back one level; ``back to search`` starts over;
``buy now`` ends the episode with WebShop's reward. An action that is malformed or not available on the page is
answered with the unchanged page and ``action_valid = False``; the env never raises on an action.
Reward: 10 when the WebShop score is 1, else 0 (verl-agent); the score itself is ``info["task_score"]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from envs.base import Observation, StepResult, Task, TextEnv
from envs.webshop.catalogue import Catalogue
from envs.webshop.config import WebshopSettings
from envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    DETAIL_PAGES,
    NEXT_PAGE,
    PREV_PAGE,
    Page,
    action_error,
    split_action,
    step_outcome,
)
from envs.webshop.reward import Goal, get_reward
from envs.webshop.search import SearchIndex


@dataclass
class _Browse:
    """Where the shopper is: the state WebShop keeps in its session and URL."""

    kind: str = "search"
    query: str = ""
    results: list[str] = field(default_factory=list)
    page_no: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    detail: str | None = None
    score: float | None = None


class WebshopEnv(TextEnv):
    def __init__(self, catalogue: Catalogue, index: SearchIndex, settings: WebshopSettings):
        self.catalogue, self.index, self.settings = catalogue, index, settings
        self.goal: Goal | None = None
        self.state = _Browse()
        self.steps = 0
        self.done = True
        self.page: Page | None = None

    # ------------------------------------------------------------------ TextEnv
    def reset(self, task: Task) -> Observation:
        if not isinstance(task.payload, Goal):
            raise TypeError(f"webshop task {task.task_id!r} has no goal payload; take tasks from "
                            "WebshopBenchmark.panel(...)")
        self.goal, self.state, self.steps, self.done = task.payload, _Browse(), 0, False
        self.page = self._render()
        return self._observation()

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("the episode is over; call reset(task) first")
        self.steps += 1
        error = action_error(self.page, action)
        if error is None:
            self._apply(*split_action(action))
            self.page = self._render()
        reward, self.done, info = step_outcome(self.state.score, self.steps, self.settings.max_steps, error,
                                               self.goal.category)
        return StepResult(self._observation(), reward, self.done, info)

    # ------------------------------------------------------------------ transitions
    def _apply(self, verb: str, arg: str) -> None:
        s = self.state
        if verb == "search":
            s.kind, s.query, s.page_no, s.asin, s.options = "results", arg, 1, None, {}
            s.results = self.index.search(arg, self.settings.search_return_n)
        elif arg == BACK_TO_SEARCH.lower():
            self.state = _Browse()
        elif arg == NEXT_PAGE.lower():
            s.page_no += 1
        elif arg == PREV_PAGE.lower():
            self._go_back()
        elif arg == BUY_NOW.lower():
            product = self.catalogue.by_asin[s.asin]
            s.score, _ = get_reward(product, self.goal, product.price, s.options)
            s.kind = "done"
        elif s.kind == "results" and arg.upper() in self.catalogue.by_asin:
            s.kind, s.asin, s.options = "item", arg.upper(), {}
        elif s.kind == "item" and arg in (d.lower() for d in DETAIL_PAGES):
            s.kind, s.detail = "detail", arg
        elif s.kind == "item":
            group = next(g for g, values in self.catalogue.by_asin[s.asin].options if arg in values)
            s.options[group] = arg
        # the remaining clickable, WebShop's search button, does nothing

    def _go_back(self) -> None:
        s = self.state
        if s.kind == "results":
            s.page_no -= 1
        elif s.kind == "item":
            s.kind, s.asin, s.options = "results", None, {}
        elif s.kind == "detail":
            s.kind, s.detail = "item", None

    def longest_texts(self, goals) -> tuple[str, str]:
        """(the longest action, the longest observation) over the catalogue: every item and detail page, a
        results page of the longest titles with both page buttons, and the search queries ``goals`` ask for."""
        catalogue, pages = self.catalogue, []
        for product in catalogue.products:
            self.state = _Browse(kind="item", asin=product.asin)
            pages.append(self._item_page())
            for detail in ("description", "features", "reviews"):
                self.state.kind, self.state.detail = "detail", detail
                pages.append(self._detail_page())
        by_title = sorted(catalogue.products, key=lambda p: len(p.title) + len(p.price_text), reverse=True)
        per_page = self.settings.results_per_page
        self.state = _Browse(kind="results", page_no=2, results=[p.asin for p in by_title[:per_page]] * 3)
        pages.append(self._results_page())
        self.state, self.page = _Browse(), None
        actions = [a for page in pages for a in page.admissible_actions]
        actions += [f"search[{goal.search_query}]" for goal in goals]
        return max(actions, key=len), max((page.text for page in pages), key=len)

    # ------------------------------------------------------------------ pages
    def _render(self) -> Page:
        kind = self.state.kind
        if kind == "search":
            return Page("search", ("Search",), ("search",) if self.settings.search_button else (), True)
        if kind == "results":
            return self._results_page()
        if kind == "item":
            return self._item_page()
        if kind == "detail":
            return self._detail_page()
        return Page("done", ("Thank you for shopping with us!", "Your score (min 0.0, max 1.0)",
                             f"{self.state.score}"), ())

    def _results_page(self) -> Page:
        s, per_page = self.state, self.settings.results_per_page
        shown = s.results[(s.page_no - 1) * per_page: s.page_no * per_page]
        nav = [BACK_TO_SEARCH]
        if s.page_no > 1:
            nav.append(PREV_PAGE)
        if s.page_no * per_page < len(s.results):
            nav.append(NEXT_PAGE)
        texts = [BACK_TO_SEARCH, f"Page {s.page_no} (Total results: {len(s.results)})", *nav[1:]]
        for asin in shown:
            product = self.catalogue.by_asin[asin]
            texts += [asin, product.title, product.price_text]
        clickables = [n.lower() for n in nav] + [a.lower() for a in shown]
        return Page("results", tuple(texts), tuple(clickables))

    def _item_page(self) -> Page:
        product = self.catalogue.by_asin[self.state.asin]
        details = DETAIL_PAGES if self.settings.detail_pages else ()
        texts = [BACK_TO_SEARCH, PREV_PAGE]
        for group, values in product.options:
            texts += [group, *values]
        texts += [product.title, f"Price: {product.price_text}", f"Rating: {product.rating}", *details, BUY_NOW]
        buttons = [BACK_TO_SEARCH, PREV_PAGE, *details, BUY_NOW]
        values = [v for _, vs in product.options for v in vs]
        return Page("item", tuple(texts), tuple([b.lower() for b in buttons] + values))

    def _detail_page(self) -> Page:
        product = self.catalogue.by_asin[self.state.asin]
        body = {"description": (product.description,), "features": product.bullet_points,
                "reviews": (f"Rating: {product.rating}",)}[self.state.detail]
        return Page("detail", (BACK_TO_SEARCH, PREV_PAGE, *body), (BACK_TO_SEARCH.lower(), PREV_PAGE.lower()))

    def _observation(self) -> Observation:
        info = {"page": self.page.kind, "asin": self.state.asin, "selected_options": dict(self.state.options),
                "instruction": self.goal.instruction_text}
        return Observation(self.page.text, self.page.admissible_actions, info)
