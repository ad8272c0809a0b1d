"""ALFWorld's hints for the ``skills`` teacher context, per task type (what a hint may say: \
envs/base.py, Benchmark.skill_for)."""

SKILLS = {
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
}
