"""Gates benchmark options (the ``gates:`` section of a run config); every field says why it has its default."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from harness.core.ranges import Checked
from harness.core.typed import ConfigError

COLOURS = ("red", "blue", "green", "gold", "grey", "pink", "teal", "plum")


@dataclass
class GatesConfig(Checked):
    section = "gates"

    horizon: int = field(default=6, metadata={"help": "routine steps per episode (a hall with a sign to follow); "
                                                      "a wrong turn there only costs a step", "range": ">= 1"})
    pivots: int = field(default=2, metadata={"help": "pivotal decisions per episode (gates); one wrong door loses "
                                                     "the episode (at once, or later: alarm_delay)", "range": ">= 1"})
    decoys: int = field(default=0, metadata={
        "help": "decoy gates per episode: shown exactly as a gate (the key's door among them) but every door is "
                "safe, so the choice cannot change the outcome (label `neutral`); an outcome-level advantage "
                "rewards or blames it at random, on the same skill the real gates use", "range": ">= 0"})
    alarm_delay: int = field(default=0, metadata={
        "help": "turns the run goes on after a wrong door before the alarm ends it as a loss (until then every "
                "observation is what the right door would have shown, and the turns are labelled `neutral`); "
                "0 ends it at once, so the wrong door is the last turn; a delay longer than the corridor ends it at "
                "the exit", "range": ">= 0"})
    choices: int = field(default=3, metadata={
        "help": "doors per gate; a policy that guesses wins (1/choices)^pivots", "range": "[2, 8]"})
    colours: int = field(default=6, metadata={
        "help": f"key colours in play, the first n of {list(COLOURS)}", "range": "[2, 8]"})
    key_at_gates: bool = field(default=False, metadata={
        "help": "repeat the key's colour in each gate's observation (the decision then rests on the line just "
                "above it, not only on the task text at the top of the prompt)"})
    slack: int = field(default=4, metadata={"help": "extra steps beyond horizon + pivots before the episode is cut "
                                                    "off (room for a few wrong turns in the halls)", "range": ">= 0"})
    train_panel_size: int = field(default=2000, metadata={"help": "generated train tasks", "range": ">= 1"})
    eval_panel_size: int = field(default=400, metadata={
        "help": "generated tasks per eval split (eval_in, eval_out)", "range": ">= 1"})
    demo_pivots: Literal["uniform", "leaning", "expert"] = field(default="uniform", metadata={
        "help": "what the warm start teaches at a gate: 'uniform' (a format expert: right in the halls, every door "
                "of a gate equally, so RL has the pivots left to learn), 'leaning' (every door once and the key's "
                "door once more: a weak prior that RL must sharpen) or 'expert' (the key's door only)"})

    @property
    def max_steps(self) -> int:
        return self.cells + self.slack

    @property
    def cells(self) -> int:
        """Halls, gates and decoy gates of a corridor."""
        return self.horizon + self.pivots + self.decoys

    def __post_init__(self):
        super().__post_init__()
        if self.choices > self.colours:
            raise ConfigError(f"gates.choices: {self.choices} doors need at least as many colours; accepted: "
                              f"<= gates.colours ({self.colours})")
