"""What a learner feels: time from a control's input event to the new figure on the page, in Chromium.

    python benchmarks/browser_sliders.py                # every control of every widget, 8 moves each
    python benchmarks/browser_sliders.py --moves 20     # more moves per control
    python benchmarks/browser_sliders.py --screenshots artifacts/screenshots/widgets
    python benchmarks/browser_sliders.py --only lesson10   # the widgets whose REGISTRY name starts so

It starts JupyterLab on a copy of the course (as the browser tests do), opens one scratch notebook that
builds every widget of :data:`ampcourse.widgets.REGISTRY` (the same factories the lessons call, without
the lessons' long cells), and drives Debian's Chromium (``/usr/bin/chromium``; never a download) at
1280 × 800 with the file browser open. For each control it makes ``--moves`` moves as a learner would
(slider: a key press on the handle; dropdown: pick another option; text box: type and press Enter; bit
toggle: click), one at a time, and measures, in the page, from the input event (``event.timeStamp`` of
the key press / change / click) to the moment a ``MutationObserver`` sees the widget's ``<img src>``
change — the new figure. Then a burst: 10 key presses 50 ms apart on each slider; the updates coalesce
(ipywidgets sends only the newest value while the kernel is busy) and the figure finally shown must be
the one for the slider's final value (for lesson 02, whose figure title names the scale, the SVG's text
is compared with the slider's readout).

Prints per control: moves, median and max latency (ms), and the load average before and after — on a
shared 2-core machine the load changes the numbers a lot, so quote it with them. Budget: median ≤ 100 ms,
max ≤ 250 ms on an idle 2-core machine. A measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ampcourse.authoring import KERNELSPEC, LANGUAGE_INFO  # noqa: E402
from ampcourse.widgets import REGISTRY  # noqa: E402
from tests.browser.lab import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    interactive_outputs,
    open_notebook,
    run_all,
    start_lab,
)

# Where a widget starts when its default makes some control's moves change nothing in the figure: lesson 10's
# history length matters only around a spike (without one, every history gives the same curves).
START = {"lesson10.delayed_scaling": "spike_bits=6", "lesson10.granularity_explorer": "log10_outlier=5.0"}
#: Key presses in the burst on each slider (50 ms apart).
BURST_PRESSES = 10

OBSERVER = """(area) => {
    const state = {inputs: [], keys: [], images: []};
    const record = (e) => { if (area.contains(e.target)) state.inputs.push(e.timeStamp); };
    area.addEventListener('keydown', record, true);
    area.addEventListener('keydown', (e) => { if (area.contains(e.target)) state.keys.push(e.timeStamp); }, true);
    area.addEventListener('change', record, true);
    area.addEventListener('click', record, true);
    const img = area.querySelector('img');
    new MutationObserver(() => state.images.push({t: performance.now(), src: img.src}))
        .observe(img, {attributes: true, attributeFilter: ['src']});
    area.__bench = state;
}"""


def _state(area) -> dict:
    return area.evaluate("(area) => ({inputs: area.__bench.inputs.length, images: area.__bench.images.length})")


def _latency(page, area, before: dict, timeout: float = 10.0) -> float | None:
    """ms from the latest input event to the first figure change after it; None if none came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = area.evaluate("""(area, before) => {
            const s = area.__bench;
            if (s.inputs.length <= before.inputs) return null;
            const t0 = s.inputs[s.inputs.length - 1];
            const after = s.images.slice(before.images).filter(m => m.t >= t0);
            return after.length ? after[0].t - t0 : null;
        }""", before)
        if result is not None:
            return result
        page.wait_for_timeout(20)
    return None


def _settle(page, area, quiet_ms: int = 400, timeout: float = 15.0) -> None:
    """Wait until the figure has not changed for ``quiet_ms`` (a burst's updates are all in)."""
    deadline = time.monotonic() + timeout
    last = _state(area)["images"]
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        page.wait_for_timeout(50)
        now = _state(area)["images"]
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif (time.monotonic() - quiet_since) * 1000 >= quiet_ms:
            return


def _controls(page, area) -> list[tuple[str, object]]:
    """(label, move(i)) for every control of the widget in ``area``."""
    controls = []
    for n, handle in enumerate(area.locator(".noUi-handle").all()):
        label = handle.evaluate("h => h.closest('.widget-slider').querySelector('.widget-label').textContent")
        label = label.strip() or f"slider {n}"

        def move(i, handle=handle):
            handle.focus()
            page.keyboard.press(_direction(handle))
        controls.append((f"slider {label}", move))
    for n, select in enumerate(area.locator(".widget-dropdown select").all()):
        count = select.locator("option").count()

        def move(i, select=select, count=count):
            select.select_option(index=(i + 1) % count)
        controls.append((f"dropdown {n}", move))
    values = ["65504", "0.1", "1e-8", "65520", "1/3", "-2.5", "448", "2**-24"]
    for n, box in enumerate(area.locator(".widget-text input").all()):
        def move(i, box=box):
            box.fill(values[i % len(values)])
            box.press("Enter")
        controls.append((f"text box {n}", move))
    if area.locator(".widget-toggle-button").count():
        def move(i):
            area.locator(".widget-toggle-button").nth(1 + i % 4).click()
        controls.append(("bit toggle", move))
    return controls


def _position(handle) -> tuple[float, float, float]:
    """(value, min, max) of a slider handle, from its ARIA attributes."""
    return tuple(float(handle.get_attribute(f"aria-value{what}")) for what in ("now", "min", "max"))


def _direction(handle) -> str:
    """Right, unless the handle is at its right end."""
    now, _, high = _position(handle)
    return "ArrowLeft" if now >= high else "ArrowRight"


def _burst(page, area, handle, presses: int = BURST_PRESSES, gap_ms: int = 50) -> tuple[int, int, float | None]:
    """``presses`` key presses ``gap_ms`` apart, towards the end with more room; (figures drawn, presses that
    moved the handle, ms from the last press that moved it to the last figure; None if no figure came after it).

    On a slider with fewer than ``presses`` steps to either end the handle stops at the end: the presses after
    that change nothing and draw nothing, so the time is taken from the last press that moved the handle (from
    the last press, it would come out negative)."""
    before = area.evaluate("(area) => area.__bench.keys.length")
    images_before = _state(area)["images"]
    now, low, high = _position(handle)
    key = "ArrowRight" if high - now >= now - low else "ArrowLeft"
    handle.focus()
    values = [now]
    for _ in range(presses):
        page.keyboard.press(key)
        page.wait_for_timeout(gap_ms)
        values.append(_position(handle)[0])
    _settle(page, area)
    moving = [i for i in range(presses) if values[i + 1] != values[i]]
    if not moving:
        return 0, 0, None
    drawn, last = area.evaluate("""(area, [keys, images, press]) => {
        const s = area.__bench;
        const t0 = s.keys[keys + press];
        const drawn = s.images.slice(images);
        const after = drawn.filter(m => m.t >= t0);
        return [drawn.length, after.length ? after[after.length - 1].t - t0 : null];
    }""", [before, images_before, moving[-1]])
    return drawn, len(moving), last


def _burst_note(drawn: int, moved: int, last: float | None, presses: int = BURST_PRESSES) -> str:
    """The burst line: figures drawn, and the time from the last press that moved the handle to the last figure."""
    stopped = (f" (the handle reached the end of the slider after {moved}: the other {presses - moved} moved "
               "nothing)" if moved < presses else "")
    if moved == 0:
        return f"{presses} presses moved nothing: the handle is at both ends (a slider with one value)"
    if last is None:
        return f"{drawn} figures for {presses} presses{stopped}, none after the last press that moved the handle"
    what = "the last press" if moved == presses else "the last press that moved the handle"
    return f"{drawn} figures for {presses} presses{stopped}, the last one {last:.0f} ms after {what}"


def _figure_text(area) -> str:
    return area.evaluate("async (area) => await (await fetch(area.querySelector('img').src)).text()")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--moves", type=int, default=8, help="moves per control (default 8)")
    parser.add_argument("--screenshots", type=Path, default=None,
                        help="folder for a screenshot of every widget at 1280×800, DPR 1 and DPR 2")
    parser.add_argument("--only", default="", metavar="PREFIX",
                        help="only the widgets whose REGISTRY name starts with PREFIX (e.g. lesson10)")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    names = sorted(name for name in REGISTRY if name.startswith(args.only))
    if not names:
        raise SystemExit(f"no widget in REGISTRY starts with {args.only!r}: {sorted(REGISTRY)}")
    cells = [nbformat.v4.new_code_cell("from ampcourse.widgets import REGISTRY")]
    cells += [nbformat.v4.new_code_cell(f"REGISTRY[{name!r}][0]({START.get(name, '')})") for name in names]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO})
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        server = start_lab(ROOT, Path(tmp))
        nbformat.write(nb, server.root / "bench_widgets.ipynb")
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
                shots = [1, 2] if args.screenshots else [1]
                for scale in shots:
                    page = browser.new_page(viewport={"width": 1280, "height": 800}, device_scale_factor=scale)
                    open_notebook(page, server, "bench_widgets.ipynb")
                    run_all(page)
                    areas = interactive_outputs(page)
                    if len(areas) != len(names):
                        raise SystemExit(f"{len(areas)} widgets rendered, {len(names)} expected")
                    for name, area in zip(names, areas, strict=True):
                        area.scroll_into_view_if_needed()
                        if args.screenshots:
                            args.screenshots.mkdir(parents=True, exist_ok=True)
                            area.screenshot(path=str(args.screenshots / f"{name}_dpr{scale}.png"))
                        if scale != 1:
                            continue
                        area.evaluate(OBSERVER)
                        for label, move in _controls(page, area):
                            times = []
                            for i in range(args.moves):
                                before = _state(area)
                                move(i)
                                latency = _latency(page, area, before)
                                _settle(page, area, quiet_ms=150)
                                if latency is not None:
                                    times.append(latency)
                            rows.append((name, label, times, args.moves))
                            print(_row(name, label, times, args.moves), flush=True)
                        handles = area.locator(".noUi-handle").all()
                        if handles:
                            note = _burst_note(*_burst(page, area, handles[0]))
                            if name == "lesson02.loss_scale_histogram":
                                value = area.locator(".widget-readout").first.inner_text().strip()
                                matches = f"S = 2^{value} " in _figure_text(area)
                                note += f"; final figure shows the final value {value}: {matches}"
                            print(f"{'':<34} burst: {note}", flush=True)
                    page.close()
                browser.close()
        finally:
            server.stop()
    load_after = os.getloadavg()
    medians = [statistics.median(t) for _, _, t, _ in rows if t]
    maxima = [max(t) for _, _, t, _ in rows if t]
    print(f"load average before {load_before[0]:.2f} / after {load_after[0]:.2f} (1 min) on {os.cpu_count()} cores")
    if medians:
        print(f"all controls: worst median {max(medians):.0f} ms, worst max {max(maxima):.0f} ms "
              "(budget: median <= 100 ms, max <= 250 ms on an idle 2-core machine)")


def _row(name: str, label: str, times: list[float], moves: int) -> str:
    if not times:
        return f"{name:<34} {label:<34} no figure change seen in {moves} moves"
    missing = f"  ({moves - len(times)} moves without a new figure)" if len(times) < moves else ""
    return (f"{name:<34} {label:<34} n={len(times):<3} median {statistics.median(times):6.0f} ms  "
            f"max {max(times):6.0f} ms{missing}")


if __name__ == "__main__":
    main()
