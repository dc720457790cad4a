"""Write each lesson's main figure as a PNG into artifacts/figures/ (not committed), to look at.

    python benchmarks/figures.py
"""

from __future__ import annotations

from pathlib import Path

from ampcourse.widgets import REGISTRY
from ampcourse.widgets.lesson01 import bit_layouts_png, ulp_png

OUT = Path(__file__).resolve().parent.parent / "artifacts" / "figures"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "lesson01_bit_layouts.png").write_bytes(bit_layouts_png())
    (OUT / "lesson01_ulp.png").write_bytes(ulp_png())
    for name, (factory, moves) in sorted(REGISTRY.items()):
        widget = factory()
        (OUT / f"{name.replace('.', '_')}_default.png").write_bytes(widget.image.value)
        widget.set(**moves[len(moves) // 2])
        (OUT / f"{name.replace('.', '_')}_moved.png").write_bytes(widget.image.value)
    for path in sorted(OUT.glob("*.png")):
        print(path.relative_to(OUT.parent.parent))


if __name__ == "__main__":
    main()
