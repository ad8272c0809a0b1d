"""WebShop benchmark options (the ``webshop:`` section of a run config).

The defaults are the paper's protocol (WebShop's own sizes); a profile that shrinks the task (config/tiny.yaml,
config/smoke.yaml) says so in its own ``webshop:`` section. ``resolve`` turns a config into the frozen
``WebshopSettings`` that the catalogue, the env and the prompts read.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from harness.core.ranges import Checked
from harness.core.typed import ConfigError


@dataclass
class WebshopConfig(Checked):
    section = "webshop"
    # no credit_label on its steps; said here too, so a check needs no engine (whose packages may be absent)
    labels_turns = False

    url: str | None = field(default=None, metadata={
        "help": "a running WebShop site (web_agent_site.app); null = the offline catalogue shipped here"})
    max_steps: int = field(default=15, metadata={"help": "actions per episode at most", "range": ">= 1"})
    train_panel_size: int | None = field(default=None, metadata={
        "help": "train goals (null = every goal outside the eval pool)", "range": ">= 1"})
    eval_panel_size: int = field(default=500, metadata={
        "help": "goals of the eval panel (paper: 500 goals)", "range": ">= 1"})
    eval_pool_size: int = field(default=500, metadata={
        "help": "goals held out for evaluation (WebShop's test goals 0..499); the rest are train goals",
        "range": ">= 1"})
    request_timeout_s: float = field(default=10.0, metadata={
        "help": "timeout of one request to a WebShop server", "range": "> 0"})
    # Task size (the defaults are WebShop's own)
    products_per_type: int = field(default=50, metadata={
        "help": "catalogue size = product types (20) x this", "range": ">= 1"})
    asin_length: int = field(default=8, metadata={
        "help": 'random characters after "B0" in a product id (WebShop: 8)', "range": ">= 1"})
    goals_per_product: int = field(default=5, metadata={"help": "instructions generated per product", "range": ">= 1"})
    max_option_groups: int = field(default=3, metadata={
        "help": "option groups (size, color, ...) a product can have", "range": "[0, 3]"})
    max_option_values: int = field(default=5, metadata={"help": "values per option group", "range": ">= 1"})
    max_goal_attributes: int = field(default=3, metadata={
        "help": "attributes an instruction asks for", "range": ">= 1"})
    results_per_page: int = field(default=10, metadata={
        "help": "search results per page (WebShop: 10)", "range": ">= 1"})
    search_return_n: int = field(default=50, metadata={
        "help": "results a search returns over all pages (WebShop: 50)", "range": ">= 1"})
    detail_pages: bool = field(default=True, metadata={
        "help": "Description / Features / Reviews buttons on the item page"})
    search_button: bool = field(default=True, metadata={
        "help": "list click[search] on the search page, as WebShop's HTML scraping does"})


    def __post_init__(self):
        super().__post_init__()
        if self.eval_panel_size > self.eval_pool_size:
            raise ConfigError(f"webshop.eval_panel_size: {self.eval_panel_size} exceeds the eval pool of "
                              f"{self.eval_pool_size} goals; accepted: <= webshop.eval_pool_size")

@dataclass(frozen=True)
class WebshopSettings:
    """The resolved, hashable sizing of one WebShop instance (the config's sizes and the prompt's think)."""

    max_steps: int
    think: bool
    products_per_type: int
    asin_length: int
    goals_per_product: int
    max_option_groups: int
    max_option_values: int
    max_goal_attributes: int
    results_per_page: int
    search_return_n: int
    detail_pages: bool
    search_button: bool
    train_panel_size: int | None  # None = every training goal
    eval_panel_size: int
    eval_pool_size: int  # goals held out for evaluation (WebShop's test goals 0..499)

    def catalogue_key(self) -> tuple:
        """The fields the generated catalogue and goals depend on (the cache key)."""
        return (self.products_per_type, self.asin_length, self.goals_per_product, self.max_option_groups,
                self.max_option_values,
                self.max_goal_attributes, self.eval_pool_size)


SETTING_FIELDS = ("products_per_type", "asin_length", "goals_per_product", "max_option_groups", "max_option_values",
                  "max_goal_attributes", "results_per_page", "search_return_n", "detail_pages", "search_button",
                  "train_panel_size", "eval_panel_size", "eval_pool_size")


def resolve(config: WebshopConfig, think: bool = False) -> WebshopSettings:
    """The config's sizes as frozen settings (the config checked its own values when it was built)."""
    settings = WebshopSettings(max_steps=config.max_steps, think=think,
                               **{name: getattr(config, name) for name in SETTING_FIELDS})
    return settings


def settings_dict(settings: WebshopSettings) -> dict:
    return dataclasses.asdict(settings)
