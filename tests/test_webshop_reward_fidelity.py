"""WebShop's own reward expectations (``tests/web-agent-site/engine/test_goal.py`` of princeton-nlp/WebShop, the
version written for ``spacy.load("en_core_web_sm")``), checked against ``envs.webshop.reward``.

The cases are WebShop's: their titles, categories, attributes, options, prices and expected numbers (with WebShop's
tolerances). The test code is written here: an adapter turns WebShop's dicts into this project's ``Product`` /
``Goal``. One published number is not reproduced; see ``test_published_title_score_of_the_adidas_pair``.
"""
from math import isclose

import pytest

from envs.webshop.nouns import title_nouns
from envs.webshop.reward import Goal, Product, attribute_matches, get_reward, option_matches, type_reward

ADIDAS_GOAL = "adidas Unisex-Adult D.o.n. Issue 2 Basketball Shoe"
ADIDAS_BOUGHT = "adidas Unisex-Adult D.o.n. Issue 2 Indoor Court Shoe"
CORD_GOAL_LONG = ("Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar Home "
                  "Theater System Subwoofer")
CORD_GOAL = "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar"
CORD_BOUGHT = ("BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home Theater "
               "System")
KNOB = "Rusticware 921ORB Kitchen and Bath Cabinet Knob"
TWEEZERS = ("Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable Makeup Tweezers "
            "(Silver)")
SNEAKER = "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White"


def product(title="", query="", category_path="", attributes=(), bullets=(), description=""):
    """WebShop's purchased-product dict as a ``Product`` (name and Title are the same field here)."""
    return Product(asin="B0TEST", title=title, category="", query=query, product_category=category_path,
                   attributes=tuple(attributes), options=(), price=0.0, bullet_points=tuple(bullets),
                   description=description)


def goal(name="", query="", category_path="", attributes=(), options=None, price_upper=1_000_000.0):
    return Goal(asin="B0GOAL", category="", query=query, name=name, product_category=category_path,
                instruction_text="", attributes=tuple(attributes), goal_options=tuple((options or {}).items()),
                price_upper=price_upper)


def title_score(goal_name, bought_name):
    return type_reward(product(title=bought_name, query="Query 2", category_path="d › e › f"),
                       goal(name=goal_name, query="Query 1", category_path="a › b › c"))[3]


# --- get_type_reward -------------------------------------------------------------------------------------------

def test_exact_type_match():
    r_type, query_match, category_match, score = type_reward(
        product(title="Name 1", query="Query 1", category_path="a › b › c"),
        goal(name="Name 1", query="Query 1", category_path="a › b › c"))
    assert (r_type, query_match, category_match, score) == (1.0, True, True, 1)


@pytest.mark.parametrize("bought_path,matches", [
    ("b › c › a", True), ("d › e › f", False), ("a › d › b", True), ("a › a › b", True), ("a › a › d", False)])
def test_category_match_ignores_order_and_repeats(bought_path, matches):
    _, query_match, category_match, _ = type_reward(
        product(title="Name 1", query="Query 2", category_path=bought_path),
        goal(name="Name 1", query="Query 1", category_path="a › b › c"))
    assert query_match is False
    assert category_match is matches


@pytest.mark.parametrize("goal_name,bought_name,published", [
    (CORD_GOAL_LONG, CORD_BOUGHT, 0.31),  # 5 shared of 16 nouns = 0.3125
    (CORD_GOAL, CORD_BOUGHT, 0.17),  # 2 shared of 12 nouns = 0.1667
])
def test_published_title_scores(goal_name, bought_name, published):
    assert isclose(title_score(goal_name, bought_name), published, abs_tol=1e-2)


def test_completely_different_titles():
    assert title_score(KNOB, TWEEZERS) < 0.05


@pytest.mark.xfail(strict=True, reason=(
    "WebShop's 0.85 was measured with spaCy 3.4.1's en_core_web_sm (its requirements.txt), which tags 'adidas' as "
    "a noun: 6 of 7. The pinned 3.8.0 pipeline tags it VERB/VBD: 5 of 6 = 0.833, outside WebShop's 0.01 tolerance; "
    "PyPI holds no 3.4 copy (README, 'Pinned model packages')"))
def test_published_title_score_of_the_adidas_pair():
    assert isclose(title_score(ADIDAS_GOAL, ADIDAS_BOUGHT), 0.85, abs_tol=1e-2)


def test_adidas_pair_under_the_pinned_pipeline():
    # what the pinned pipeline gives instead, so that a change of pipeline shows up here
    assert "adidas" not in title_nouns(ADIDAS_GOAL)
    assert title_score(ADIDAS_GOAL, ADIDAS_BOUGHT) == pytest.approx(5 / 6)


# --- get_attribute_reward --------------------------------------------------------------------------------------

GOAL_ATTRS = ("tea tree", "essential oils", "natural ingredients")


@pytest.mark.parametrize("bought,matches", [
    (product(attributes=["tea tree", "essential oil", "natural ingredients"]), 3),
    (product(attributes=["essential oil", "natural ingredients"]), 2),
    (product(bullets=["This shampoo has essential oils and smells like lemons"],
             description="Best shampoo on the market, made with natural ingredients"), 2),
    (product(attributes=["tea bag", "earl gray", "lipton"], title="English tea for breakfast",
             bullets=["Soothing aroma", "Calming, great feeling"],
             description="Best tea made by Lipton, great to pair with breakfast"), 0),
])
def test_attribute_matches(bought, matches):
    assert attribute_matches(bought, goal(attributes=GOAL_ATTRS)) == matches


# --- get_option_reward -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("goal_options,bought_options,hits", [
    ({"color": "grey", "size": "XL", "amount": "pack of 12"},
     {"amount": "pack of 12", "color": "grey", "size": "XL"}, 3),
    ({"color": "grey", "size": "XL", "amount": "pack of 12"},
     {"amount": "pack of 12", "color": "blue", "size": "XL"}, 2),
    ({"flavor": "cool powder snow", "size": "XL", "amount": "pack of 12"},
     {"amount": "pack of 12", "flavor": "powder snow", "size": "XL"}, 3),
    ({"color": "goal 1", "style": "goal 2"}, {}, 0),
])
def test_option_hits(goal_options, bought_options, hits):
    g = goal(options=goal_options)
    assert option_matches(product(), g.goal_options, bought_options) == hits
    r_option = get_reward(product(), g, 0.0, bought_options)[1].r_option
    assert r_option == hits / len(goal_options)


def test_no_goal_options_gives_no_option_reward():
    assert get_reward(product(), goal(), 0.0, {"color": "goal 1", "style": "goal 2"})[1].r_option is None


def test_two_matching_purchases_hit_one_goal_option_once():
    # the case: both clicked options match the one goal option; WebShop counts it once (1/1, not 2/1)
    g = goal(options={"color": "navy blue"})
    assert option_matches(product(), g.goal_options, {"color": "blue", "pattern": "navy blue"}) == 1


# --- get_reward ------------------------------------------------------------------------------------------------

def test_total_reward_cases():
    g = goal(name=SNEAKER, query="Query 1", category_path="a › b › c", attributes=GOAL_ATTRS,
             options={"color": "grey", "size": "XL"}, price_upper=40.0)
    bought_options = {"color": "grey", "size": "XL"}
    bought = product(title=SNEAKER, query="Query 1", category_path="a › b › c",
                     attributes=["tea tree", "essential oil", "natural ingredients"])
    assert get_reward(bought, g, 35, bought_options)[0] == 1
    # WebShop's case sets BulletPoints to a bare string, which its ' '.join spreads into single characters:
    # only the description's "natural ingredients" matches. tuple(string) hands the reward the same characters.
    bought = product(title=SNEAKER, query="Query 1", category_path="a › b › c",
                     bullets=tuple("This shampoo has essential oils and smells like lemons"),
                     description="Best shampoo on the market, made with natural ingredients")
    assert isclose(get_reward(bought, g, 35, bought_options)[0], 2 / 3, abs_tol=1e-2)
    g = goal(name=SNEAKER, query="Query 1", category_path="a › b › c", attributes=GOAL_ATTRS,
             options={"color": "grey", "size": "XL", "amount": "pack of 12"}, price_upper=40.0)
    assert isclose(get_reward(bought, g, 35, bought_options)[0], 0.5714, abs_tol=1e-2)
    g = goal(name=CORD_GOAL, query="Query 1", category_path="a › b › c", attributes=GOAL_ATTRS,
             options={"color": "grey", "size": "XL", "amount": "pack of 12"}, price_upper=40.0)
    bought = product(title=CORD_BOUGHT, query="Query 2", category_path="a › d › e",
                     bullets=tuple("This shampoo has essential oils and smells like lemons"),
                     description="Best shampoo on the market, made with natural ingredients")
    assert isclose(get_reward(bought, g, 35, bought_options)[0], 0.2857, abs_tol=1e-2)
