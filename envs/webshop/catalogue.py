"""The offline WebShop catalogue and its synthetic goals, generated deterministically from ``catalogue_spec``.

Products carry what WebShop's scraped items carry (title, query, category path, attributes, option groups,
price, bullet points, description). Goals are written as WebShop's synthetic goals are
(``goal.py`` ``get_synthetic_goals``): some of the product's attributes, one value per option group
("with color: navy, and size: large") and a price ceiling drawn from the next four multiples of 10 above the
price. The goal list is shuffled once with a fixed seed; the first ``eval_pool_size`` goals are the eval pool
(as verl-agent evaluates on WebShop goals 0..499), the rest are training goals.

Generation takes well under a second and is cached per process; ``digest`` hashes the generated content, so a
change to the generator or the sizing changes every task id and therefore every panel hash.
"""
from __future__ import annotations

import functools
import hashlib
import random
import re
from dataclasses import dataclass

from envs.webshop.catalogue_spec import (
    BRANDS,
    BULLET_TEMPLATES,
    CATEGORY_ROOTS,
    DESCRIPTION_TEMPLATES,
    INSTRUCTION_TEMPLATES,
    PRODUCT_TYPES,
    ProductType,
)
from envs.webshop.reward import FUZZY_THRESHOLD, Goal, Product, normalize_color, token_set_ratio

CATALOGUE_SEED = "webshop-catalogue-v1"  # fixed: the catalogue is part of the benchmark, not of a run's seed
PRICE_STEPS = [10.0 * i for i in range(1, 100)]  # WebShop's PRICE_RANGE


@dataclass(frozen=True)
class Catalogue:
    products: tuple[Product, ...]
    goals: tuple[Goal, ...]  # shuffled; [:eval_pool_size] = eval pool
    eval_pool_size: int
    digest: str  # sha256 of products and goals

    @functools.cached_property
    def by_asin(self) -> dict[str, Product]:
        return {p.asin: p for p in self.products}

    @property
    def eval_goals(self) -> tuple[Goal, ...]:
        return self.goals[: self.eval_pool_size]

    @property
    def train_goals(self) -> tuple[Goal, ...]:
        return self.goals[self.eval_pool_size:]


class CatalogueError(ValueError):
    """The catalogue vocabulary breaks a matching rule (a bug in ``catalogue_spec``)."""


def _asin(rng: random.Random, taken: set[str], length: int) -> str:
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(length))
        if asin not in taken:
            taken.add(asin)
            return asin


def _make_product(rng: random.Random, category: str, ptype: ProductType, asin: str, max_groups: int,
                  max_values: int) -> Product:
    brand = rng.choice(BRANDS)
    attributes = tuple(rng.sample(ptype.attributes, rng.randint(3, 5)))
    in_title = [a.title() for a in attributes[: rng.randint(0, 2)]]
    title = " ".join([brand, *in_title, ptype.noun.title()])
    # about one product in ten has no options, as some WebShop items do
    n_groups = 0 if rng.random() < 0.1 else min(max_groups, len(ptype.options))
    options = []
    for group, values in ptype.options[:n_groups]:
        count = min(len(values), max_values, rng.randint(2, max(2, max_values)))
        options.append((group, tuple(rng.sample(values, count))))
    bullets = tuple(rng.choice(BULLET_TEMPLATES).format(attr=a) for a in attributes)
    description = rng.choice(DESCRIPTION_TEMPLATES).format(brand=brand, noun=ptype.noun)
    low, high = ptype.price
    return Product(
        asin=asin, title=title, category=category, query=ptype.query,
        product_category=" › ".join((CATEGORY_ROOTS[category], *ptype.path)),
        attributes=attributes, options=tuple(options),
        price=round(rng.uniform(low, high), 2), bullet_points=bullets, description=description,
        rating=f"{rng.choice([3.5, 4.0, 4.2, 4.5, 4.7, 4.8])} out of 5 stars",
    )


def check_vocabulary(ptype: ProductType) -> None:
    """No two attributes, and no two option values, of a type may match each other under WebShop's rules."""
    for attr in ptype.attributes:
        for other in ptype.attributes:
            if other != attr and token_set_ratio(attr, other) > FUZZY_THRESHOLD:
                raise CatalogueError(f"{ptype.noun}: attributes {attr!r} and {other!r} match each other fuzzily")
    values = [v for _, vs in ptype.options for v in vs]
    for value in values:
        for other in values:
            if other != value and normalize_color(other) == normalize_color(value):
                raise CatalogueError(f"{ptype.noun}: options {value!r} and {other!r} normalise alike")


def check_product(product: Product, ptype: ProductType) -> None:
    """No attribute the product lacks, and none of its option values, may occur in its text (WebShop would
    credit them on a text match)."""
    text = " ".join([product.title, *product.bullet_points, product.description]).lower()
    for attr in ptype.attributes:
        if attr not in product.attributes and attr in text:
            raise CatalogueError(f"{product.asin}: attribute {attr!r} it lacks occurs in its text")
    for value in (v for _, vs in product.options for v in vs):
        if normalize_color(value) in text:
            raise CatalogueError(f"{product.asin}: option {value!r} (normalised {normalize_color(value)!r}) "
                                 "occurs in its text")


def _price_upper(rng: random.Random, price: float) -> float:
    """WebShop's ceiling: the larger of two draws among the next four multiples of 10 above the price."""
    steps = [p for p in PRICE_STEPS if p > price][:4]
    return sorted(rng.sample(steps, 2))[1] if len(steps) >= 2 else 1_000_000.0


def _make_goal(rng: random.Random, product: Product, ptype: ProductType, max_attrs: int) -> Goal:
    n_attrs = min(max_attrs, len(product.attributes))
    attrs = tuple(rng.sample(product.attributes, rng.randint(min(2, n_attrs), n_attrs)))
    options = tuple((group, rng.choice(values)) for group, values in product.options)
    article = "some" if ptype.noun.endswith("s") else "a"
    core = rng.choice(INSTRUCTION_TEMPLATES).format(article=article, noun=ptype.noun, attrs=" and ".join(attrs))
    core = re.sub(r"\ba ([aeiou])", r"an \1", core)
    option_text = " with " + ", and ".join(f"{g}: {v}" for g, v in options) if options else ""
    upper = _price_upper(rng, product.price)
    price_text = f", and price lower than {upper:.2f} dollars" if upper < 1_000_000 else ""
    return Goal(
        asin=product.asin, category=product.category, query=product.query, name=product.title,
        product_category=product.product_category,
        instruction_text=f"{core}{option_text}{price_text}", attributes=attrs, goal_options=options,
        price_upper=upper, search_query=f"{core}{option_text}",
    )


@functools.lru_cache(maxsize=8)
def build_catalogue(products_per_type: int, asin_length: int, goals_per_product: int, max_option_groups: int,
                    max_option_values: int, max_goal_attributes: int, eval_pool_size: int) -> Catalogue:
    """Generate (once per process and sizing) the products and goals; arguments = ``WebshopSettings.catalogue_key``."""
    rng = random.Random(CATALOGUE_SEED)
    products, goals, taken, seen_text = [], [], set(), set()
    for category, ptypes in PRODUCT_TYPES.items():
        for ptype in ptypes:
            check_vocabulary(ptype)
            for _ in range(products_per_type):
                product = _make_product(rng, category, ptype, _asin(rng, taken, asin_length), max_option_groups,
                                        max_option_values)
                check_product(product, ptype)
                products.append(product)
                for _ in range(goals_per_product):
                    goal = _make_goal(rng, product, ptype, max_goal_attributes)
                    if goal.instruction_text not in seen_text:
                        seen_text.add(goal.instruction_text)
                        goals.append(goal)
    random.Random(CATALOGUE_SEED + "/goals").shuffle(goals)
    if len(goals) <= eval_pool_size:
        raise CatalogueError(f"only {len(goals)} goals for an eval pool of {eval_pool_size}; raise products_per_type")
    products, goals = tuple(products), tuple(goals)
    # the dataclass repr of tuples, strings and floats is stable across processes and platforms
    digest = hashlib.sha256(repr((products, goals)).encode()).hexdigest()
    return Catalogue(products, goals, eval_pool_size, digest)


def product_type_of(product: Product) -> ProductType:
    for ptype in PRODUCT_TYPES[product.category]:
        if ptype.query == product.query:
            return ptype
    raise KeyError(product.query)


def search_document(product: Product) -> str:
    """The text the search index holds for a product: title, bullet points, description and option values."""
    options = " ".join(f"{group}: {' '.join(values)}" for group, values in product.options)
    return " ".join([product.title, *product.bullet_points, product.description, options])
