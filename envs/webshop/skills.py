"""WebShop's hints for the ``skills`` teacher context, per task type (what a hint may say: Benchmark.skill_for)."""

SKILLS = {
    "default": "Search with the product type and its key attributes. On the results page, click the item "
               "whose title matches the type and attributes and whose price is under the limit. On the item "
               "page, click each option value the instruction asks for, then click buy now.",
}
