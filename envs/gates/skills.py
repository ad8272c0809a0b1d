"""Gates's hints for the ``skills`` teacher context, per task type (what a hint may say: Benchmark.skill_for)."""

SKILLS = {
    "default": "In a hall, go the way the sign points. At a gate, open the door of the same colour as the key "
               "the task says you hold: any other door ends the run.",
}
