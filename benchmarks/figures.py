"""Write each lesson's main figure as a PNG into artifacts/figures/ (not committed), to look at.

    python benchmarks/figures.py
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from ampcourse.widgets import REGISTRY
from ampcourse.widgets.base import figure_png
from ampcourse.widgets.lesson01 import bit_layouts_png, ulp_png
from ampcourse.widgets.lesson04 import trajectory_png

OUT = Path(__file__).resolve().parent.parent / "artifacts" / "figures"


def text_png(text: str) -> bytes:
    """A monospace text block (a table) as a PNG."""
    lines = text.splitlines()
    width = max(len(line) for line in lines)
    fig = Figure(figsize=(0.09 * width + 0.4, 0.17 * len(lines) + 0.3))
    fig.text(0.01, 0.99, text, family="monospace", fontsize=9, va="top")
    return figure_png(fig, dpi=100)


def lesson03_trace_table() -> str:
    import torch
    import torch.nn.functional as F

    from ampcourse.autocast_trace import trace

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x, y = torch.randn(2, 4), torch.tensor([0, 2])

    def step():
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()

    result = trace(step)
    return result.table() + "\n\n" + str(result.summary())


def main() -> None:
    from ampcourse.scaler_run import real_scaler_run

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "lesson03_trace_table.png").write_bytes(text_png(lesson03_trace_table()))
    (OUT / "lesson04_real_run.png").write_bytes(
        trajectory_png(real_scaler_run().simulated(), title="real FP16 run, replayed by the simulator"))
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
