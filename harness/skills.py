"""Privileged skill texts for the ``skills`` teacher context (RLSD, SDAR, GRPO+OPSD).

Written for this project: one short procedural hint per task type, the kind of knowledge a skill library
distils from successful episodes. They never contain task-specific answers (object locations, product ids),
so the teacher is better informed than the student without being handed the solution.
"""
from __future__ import annotations

SKILLS: dict[str, dict[str, str]] = {
    "alfworld": {
        "pick_and_place": "Find the object by opening receptacles one at a time, take it, go to the target "
                          "receptacle and put it there. Do not pick up anything else.",
        "look_at_obj_in_light": "Find the object and take it, then find a desklamp or floorlamp, go to it and "
                                "use the lamp while holding the object.",
        "pick_clean_then_place": "Find and take the object, go to the sinkbasin and clean it with the sinkbasin, "
                                 "then go to the target receptacle and put it there.",
        "pick_heat_then_place": "Find and take the object, go to the microwave and heat it with the microwave, "
                                "then go to the target receptacle and put it there.",
        "pick_cool_then_place": "Find and take the object, go to the fridge and cool it with the fridge, then go "
                                "to the target receptacle and put it there.",
        "pick_two_obj_and_place": "Two objects are needed. Find the first, take it, put it in the target "
                                  "receptacle, then search the remaining receptacles for the second and put it "
                                  "there too.",
        "default": "Search receptacles systematically, open closed ones, and only act on the objects the task names.",
    },
    "gates": {
        "default": "In a hall, go the way the sign points. At a gate, open the door of the same colour as the key "
                   "the task says you hold: any other door ends the run.",
    },
    "webshop": {
        "default": "Search with the product type and its key attributes. On the results page, click the item "
                   "whose title matches the type and attributes and whose price is under the limit. On the item "
                   "page, click each option value the instruction asks for, then click buy now.",
    },
}


def skill_for(benchmark: str, task_type: str) -> str:
    table = SKILLS.get(benchmark, {})
    return table.get(task_type) or table.get("default", "")
