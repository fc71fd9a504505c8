"""The look shared by every plot of a report: one colour per objective and init, the objectives'
families, file-name fragments, and PNGs saved small and byte-stable."""

from __future__ import annotations

import io
import re
import zlib
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from kdbench.report.frames import natural_key
from kdbench.runtime.storage import atomic_write

# One colour per objective and per init in every report (Paul Tol's colour-blind-safe "muted" and
# "vibrant" schemes). Inits are coloured by role: a 6-layer teacher's every-k-th (2,4,6) and spread
# (1,4,6) inits share the colours of the 12-layer ones they stand for.
OBJECTIVE_COLOURS = {
    "vanilla_kd": "#332288",
    "distilbert": "#0077BB",
    "hid_cls": "#117733",
    "hid_cls_contrast": "#44AA99",
    "hid_seq": "#999933",
    "att_mse": "#882255",
    "att_kl": "#CC6677",
    "att_mse+hid_seq": "#AA4499",
    "att_kl+hid_seq": "#DDCC77",
    "att_kl+val_kl": "#88CCEE",
    "val_kl": "#EE7733",
    "minilm_v2": "#EE3377",
    "tinybert": "#CC3311",
}
INIT_COLOURS = {
    "4,8,12": "#0077BB",
    "2,4,6": "#0077BB",
    "1,8,12": "#009988",
    "1,4,6": "#009988",
    "1,2,3": "#EE7733",
    "random": "#555555",
    "1,2,3,4,5,6": "#EE3377",
    "first 6": "#EE3377",
}
FALLBACK = (
    "#33BBEE",
    "#CC3311",
    "#BBBBBB",
    "#000000",
    "#DDAA33",
    "#BB5566",
)  # other levels, by a hash of the name
FAMILIES = ("vanilla", "hidden", "attention", "other")


def colour_of(factor: str, level: str) -> str:
    """The colour of an objective (``factor`` "objective") or an init, the same in every plot."""
    fixed = OBJECTIVE_COLOURS if factor == "objective" else INIT_COLOURS
    return fixed.get(str(level)) or FALLBACK[zlib.crc32(str(level).encode()) % len(FALLBACK)]


def family_of(objective: str) -> str:
    """vanilla (prediction-layer KD), hidden (hidden-state transfer), attention (attention or value
    relations, alone or combined with hidden states), or other."""
    name = str(objective)
    if name == "vanilla_kd":
        return "vanilla"
    if any(part in name for part in ("att", "val_", "minilm", "tinybert")):
        return "attention"
    if name.startswith("hid") or name == "distilbert":
        return "hidden"
    return "other"


def family_order(objectives) -> list[str]:
    """Objectives by family (vanilla, hidden, attention, other), naturally sorted within each."""
    return sorted(set(objectives), key=lambda o: (FAMILIES.index(family_of(o)), natural_key(o)))


def safe_name(text: str) -> str:
    """A filesystem-safe file-name fragment."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", str(text)).strip("-.")
    return name or "x"


def save_png(fig: Figure, path: Path) -> None:
    """A 256-colour palette PNG: a plot's flat colours and their anti-aliased edges fit in it, at
    about a third of the bytes of full colour (report.html carries every plot inline)."""
    FigureCanvasAgg(fig)
    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=120)
    image = Image.open(rendered).convert("RGB").quantize(colors=256, dither=Image.Dither.NONE)
    atomic_write(path, lambda handle: image.save(handle, format="png", optimize=True), binary=True)
