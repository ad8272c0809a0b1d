"""A scripted WebShop shopper with the goal in hand: search the instruction, open the goal product (paging
through the results if needed), click the goal's options, buy. It reads the page kind, the open product and
the selected options from ``Observation.info``, which the offline env fills in (they are not shown to the model).
"""
from __future__ import annotations

from envs.base import Expert, Observation
from envs.webshop.pages import BUY_NOW, NEXT_PAGE, PREV_PAGE
from envs.webshop.reward import Goal


class WebshopExpert(Expert):
    def __init__(self, goal: Goal):
        self.goal = goal
        self.settle = False  # the goal product is not among the results: buy the top one instead

    def act(self, observation: Observation) -> str:
        page, actions = observation.info.get("page"), observation.admissible_actions
        if page == "search":
            return f"search[{self.goal.search_query}]"
        if page == "results":
            target = f"click[{self.goal.asin.lower()}]"
            if target in actions:
                return target
            if f"click[{NEXT_PAGE.lower()}]" in actions:
                return f"click[{NEXT_PAGE.lower()}]"
            products = [a for a in actions if a[6:-1].upper().startswith("B0")]
            self.settle = True
            return products[0] if products else "click[back to search]"
        if page == "item":
            if observation.info.get("asin") != self.goal.asin and not self.settle:
                return f"click[{PREV_PAGE.lower()}]"
            chosen = observation.info.get("selected_options", {})
            for group, value in self.goal.goal_options:
                if chosen.get(group) != value and f"click[{value}]" in actions:
                    return f"click[{value}]"
            return f"click[{BUY_NOW.lower()}]"
        return f"click[{PREV_PAGE.lower()}]"
