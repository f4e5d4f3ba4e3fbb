"""loss.png: train loss and eval loss against step, drawn with the standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from xeoncluster.node.events.canvas import GLYPH_HEIGHT, Canvas, Colour, text_width

Point = tuple[float, float]

TRAIN_COLOUR: Colour = (31, 119, 180)
EVAL_COLOUR: Colour = (255, 127, 14)
INK: Colour = (60, 60, 60)
GRID: Colour = (225, 225, 225)


@dataclass(frozen=True)
class LossCurve:
    train: list[Point]
    eval: list[Point]

    @property
    def empty(self) -> bool:
        return not self.train and not self.eval


def curve_from_history(
    train: list[dict[str, float]],
    evals: list[dict[str, float]],
    before: float | None,
    after: float | None,
    final_step: int,
) -> LossCurve:
    """Train losses, and eval losses with the untrained (step 0) and final evaluations added when known."""
    points = {float(e["step"]): float(e["eval_loss"]) for e in evals}
    if before is not None:
        points.setdefault(0.0, float(before))
    if after is not None:
        points[float(final_step)] = float(after)
    return LossCurve([(float(e["step"]), float(e["loss"])) for e in train], sorted(points.items()))


@dataclass(frozen=True)
class Frame:
    """The plot area inside the canvas and the data range it shows."""

    left: int
    top: int
    right: int
    bottom: int
    x_max: float
    y_min: float
    y_max: float

    def at(self, point: Point) -> tuple[int, int]:
        x = self.left + (self.right - self.left) * point[0] / self.x_max
        y = self.bottom - (self.bottom - self.top) * (point[1] - self.y_min) / (self.y_max - self.y_min)
        return round(x), round(y)


def _frame(curve: LossCurve, width: int, height: int) -> Frame:
    points = curve.train + curve.eval
    low, high = min(p[1] for p in points), max(p[1] for p in points)
    pad = (high - low) * 0.05 or max(abs(high) * 0.05, 0.05)
    x_max = max(max(p[0] for p in points), 1.0)
    return Frame(70, 40, width - 20, height - 50, x_max, max(low - pad, 0.0) if low >= 0 else low - pad, high + pad)


def _axes(canvas: Canvas, frame: Frame) -> None:
    for i in range(5):
        value = frame.y_min + (frame.y_max - frame.y_min) * i / 4
        _, y = frame.at((0.0, value))
        canvas.line(frame.left, y, frame.right, y, GRID)
        label = f"{value:.3g}"
        canvas.text(frame.left - 8 - text_width(label), y - GLYPH_HEIGHT, label, INK)
    canvas.line(frame.left, frame.top, frame.left, frame.bottom, INK)
    canvas.line(frame.left, frame.bottom, frame.right, frame.bottom, INK)
    for value in (0.0, frame.x_max / 2, frame.x_max):
        x, _ = frame.at((value, frame.y_min))
        canvas.line(x, frame.bottom, x, frame.bottom + 5, INK)
        label = f"{value:.0f}"
        canvas.text(x - text_width(label) // 2, frame.bottom + 10, label, INK)
    canvas.text((frame.left + frame.right - text_width("step")) // 2, frame.bottom + 30, "step", INK)


def _series(canvas: Canvas, frame: Frame, points: list[Point], colour: Colour, marker: bool) -> None:
    pixels = [frame.at(p) for p in sorted(points)]
    for (x0, y0), (x1, y1) in pairwise(pixels):
        canvas.line(x0, y0, x1, y1, colour, thickness=2)
    for x, y in pixels if marker or len(pixels) == 1 else []:
        canvas.fill(x - 3, y - 3, 7, 7, colour)


def _legend(canvas: Canvas, frame: Frame, curve: LossCurve) -> None:
    x = frame.left
    for label, colour, points in (("train loss", TRAIN_COLOUR, curve.train), ("eval loss", EVAL_COLOUR, curve.eval)):
        if points:
            canvas.fill(x, 14, 20, 6, colour)
            canvas.text(x + 26, 12, label, INK)
            x += 26 + text_width(label) + 30


def render(curve: LossCurve, width: int = 720, height: int = 420) -> bytes:
    """The chart as PNG bytes; `curve` must not be empty."""
    canvas = Canvas(width, height)
    frame = _frame(curve, width, height)
    _axes(canvas, frame)
    _series(canvas, frame, curve.train, TRAIN_COLOUR, marker=False)
    _series(canvas, frame, curve.eval, EVAL_COLOUR, marker=True)
    _legend(canvas, frame, curve)
    return canvas.png()


def write_loss_png(path: Path, curve: LossCurve) -> bool:
    """Draw `curve` to `path`; False (and no file) when there is nothing to draw."""
    if curve.empty:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(render(curve))
    tmp.replace(path)
    return True
