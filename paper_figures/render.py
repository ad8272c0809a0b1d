"""Names, cell formatting and table writers (csv, markdown, LaTeX with booktabs).

Each table is written twice over: ``<name>.csv`` holds the tidy numbers (one row per cell, NaN where missing) for
anyone who wants to compute with them; ``<name>.md`` and ``<name>.tex`` hold the formatted table, where a missing
cell reads "—".
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from harness.grid.compute_match import COMPUTE_MATCHED
from harness.grid.runs import CONTROL_ARMS, FROZEN

MISSING = "—"
BENCHMARK_NAMES = {"alfworld": "ALFWorld", "webshop": "WebShop", "gates": "Gates"}
# ALFWorld's six task types, by the short names and in the order papers print them
CATEGORY_NAMES = {
    "pick_and_place_simple": "pick", "look_at_obj_in_light": "look", "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat", "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}
CATEGORY_ORDER = ["pick", "look", "clean", "heat", "cool", "pick2"]
OPTION_SYMBOLS = {"lam": "λ", "tau": "τ", "beta": "β", "alpha": "α", "lam_mix": "λ_mix"}


def base_method(label: str) -> str:
    return label.split("-", 1)[0]


def _display(name: str) -> tuple[str, int]:
    """(display name, table order) of a registry name or a grid arm; an unknown name shows as itself, last.

    Methods declare both on their class (``Method.display_name``, ``Method.display_order``), so a new method needs
    no edit here; the grid's control arms (frozen, compute-matched GRPO) are named in harness/grid/runs.py."""
    if name in CONTROL_ARMS:
        return CONTROL_ARMS[name]
    try:
        from harness.core import registry

        cls = registry.get(name)
    except Exception:  # not a registered method (or the registry cannot import): show the label as it is
        return name, 10**6
    return cls.display_name or name, cls.display_order


def display_name(name: str) -> str:
    """``sharpo`` → ``SHARPO``: the method's or arm's display name, without options."""
    return _display(name)[0]


def split_label(label: str) -> list[tuple[str, str]]:
    """``sharpo-lam0.2`` → [("lam", "0.2")]: the label's options, key = leading letters/underscores."""
    parts: list[str] = []
    for part in label.split("-")[1:]:
        # "-" also starts a negative exponent or value (lam1e-05): glue a part that opens with a digit back on
        if parts and part[:1].isdigit():
            parts[-1] += f"-{part}"
        else:
            parts.append(part)
    options = []
    for part in parts:
        match = (re.fullmatch(r"([A-Za-z_]+)(-?[0-9][0-9.eE+-]*)", part)
                 or re.fullmatch(r"([A-Za-z_]+?)(True|False)", part))
        # a string-valued option cannot be split from its key unambiguously: show it whole
        options.append((match.group(1), match.group(2)) if match else (part, ""))
    return options


def method_name(label: str) -> str:
    """Display name: ``sharpo-lam0.2`` → ``SHARPO (λ=0.2)``; a sweep's ``grpo@horizon8`` → ``GRPO @ horizon8``."""
    label, _, setting = label.partition("@")
    if setting:
        return f"{method_name(label)} @ {setting}"
    name = display_name(base_method(label))
    options = split_label(label)
    if not options:
        return name
    shown = [f"{OPTION_SYMBOLS.get(k, k)}={v}" if v else k for k, v in options]
    return f"{name} ({', '.join(shown)})"


# the role of each grid control arm (methods declare theirs as ``Method.control``)
CONTROL_ROLES = {FROZEN: "negative control", COMPUTE_MATCHED: "compute control"}


def role(label: str) -> str:
    """"" for a method; "positive control" (an oracle: ``Method.control = "positive"``), "negative control"
    (frozen) or "compute control" (compute-matched GRPO) for a control arm. Controls calibrate the scale the
    methods are read on; tables list them apart and never rank them."""
    base = base_method(label.partition("@")[0])
    if base in CONTROL_ARMS:
        return CONTROL_ROLES.get(base, "control")
    try:
        from harness.core import registry

        control = getattr(registry.get(base), "control", "")
    except Exception:  # not a registered method: a method, as far as the tables can tell
        return ""
    return f"{control} control" if control else ""


def arm_name(label: str) -> str:
    """``method_name``, and for a control arm whose name does not say so, its role: ``Frozen (lr 0; negative
    control)``, ``GRPO, compute-matched (compute control)``; the oracles' names already say "(positive control)"."""
    name, kind = method_name(label), role(label)
    if not kind or "control" in name:
        return name
    return f"{name[:-1]}; {kind})" if name.endswith(")") else f"{name} ({kind})"


def methods_then_controls(labels) -> list[str]:
    """The labels in their order, methods first, then the control arms: the block a table lists apart."""
    labels = list(labels)
    return [m for m in labels if not role(m)] + [m for m in labels if role(m)]


def add_roles(display: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """Add a "Role" column to a display table whose rows are ``labels`` when one of them is a control arm, so a
    table that keeps the grid's order still marks its controls."""
    roles = [role(label) for label in labels]
    return display.assign(Role=[r or "method" for r in roles]) if any(roles) else display


def category_name(category: str) -> str:
    return CATEGORY_NAMES.get(category, category)


def order_categories(categories) -> list[str]:
    rank = {c: i for i, c in enumerate(CATEGORY_ORDER)}
    return sorted(set(categories), key=lambda c: (rank.get(category_name(c), len(rank)), c))


def benchmark_name(benchmark: str) -> str:
    return BENCHMARK_NAMES.get(benchmark, benchmark)


def order_methods(labels, preferred: list[str] | None = None) -> list[str]:
    """The grid's order when given, else the methods' ``display_order``; a variant follows its base method."""
    labels = list(dict.fromkeys(labels))
    if preferred:
        rank = {label: i for i, label in enumerate(preferred)}
        return sorted(labels, key=lambda m: (rank.get(m, len(rank)), m))
    return sorted(labels, key=lambda m: (_display(base_method(m))[1], base_method(m), m != base_method(m), m))


def is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_pm(mean, half=None, digits: int = 1, scale: float = 100.0) -> str:
    """``84.9 ± 1.2``; no spread → ``84.9``; no value → ``—``."""
    if is_missing(mean):
        return MISSING
    text = f"{mean * scale:.{digits}f}"
    return text if is_missing(half) else f"{text} ± {half * scale:.{digits}f}"


def fmt_interval(point, low, high, digits: int = 1, scale: float = 100.0) -> str:
    """``84.9 [80.1, 88.0]``."""
    if is_missing(point):
        return MISSING
    if is_missing(low) or is_missing(high):  # one value: no interval to show
        return f"{point * scale:.{digits}f} [no interval]"
    return f"{point * scale:.{digits}f} [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"


def fmt_seeds(cell: str, found: int, expected: int | None) -> str:
    """Mark a cell averaged over fewer seeds than the grid asks for: ``70.1 ± 3.0 (2/3)``."""
    if expected and 0 < found < expected:
        return f"{cell} ({found}/{expected})"
    return cell


def to_markdown(table: pd.DataFrame, caption: str) -> str:
    header = "| " + " | ".join(map(str, table.columns)) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    rows = ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([f"**{caption}**", "", header, rule, *rows, ""])


_TEX_REPLACEMENTS = [
    ("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
    ("±", r"$\pm$"), ("—", "--"), ("λ", r"$\lambda$"), ("τ", r"$\tau$"), ("β", r"$\beta$"),
    ("α", r"$\alpha$"), ("≥", r"$\geq$"),
]


def tex_escape(text: str) -> str:
    for old, new in _TEX_REPLACEMENTS:
        text = text.replace(old, new)
    return text


def to_latex(table: pd.DataFrame, caption: str, label: str) -> str:
    """A booktabs table (``\\toprule``/``\\midrule``/``\\bottomrule``) via pandas' Styler."""
    escaped = table.map(lambda v: tex_escape(str(v)))
    escaped.columns = [tex_escape(str(c)) for c in table.columns]
    styler = escaped.style.hide(axis="index")
    return styler.to_latex(
        hrules=True, caption=tex_escape(caption), label=f"tab:{label}", position_float="centering",
        column_format="l" + "r" * (len(table.columns) - 1),
    )


def write_table(out_dir: Path, name: str, tidy: pd.DataFrame, display: pd.DataFrame, caption: str) -> list[Path]:
    """Write ``<name>.csv`` (tidy numbers), ``<name>.md`` and ``<name>.tex`` (formatted); return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{ext}" for ext in ("csv", "md", "tex")]
    tidy.to_csv(paths[0], index=False)
    paths[1].write_text(to_markdown(display, caption))
    paths[2].write_text(to_latex(display, caption, name))
    return paths
