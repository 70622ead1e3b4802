"""Bar charts drawn as inline SVG on the server: no script, nothing fetched, and each bar
carries its value as text so the page reads the same to a person and to a test."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from markupsafe import Markup, escape

BAR_HEIGHT = 22
LABEL_WIDTH = 260
BAR_WIDTH = 420
VALUE_WIDTH = 110
COLOURS = ("#2f6fb3", "#e08a1e", "#8a8f98")


def bars(name: str, values: Mapping[str, float], shown: Callable[[float], str]) -> Markup:
    """One horizontal bar per key, scaled to the largest value."""
    return stacked(name, {key: (value,) for key, value in values.items()}, (), shown)


def stacked(
    name: str,
    values: Mapping[str, Sequence[float]],
    parts: Sequence[str],
    shown: Callable[[float], str],
) -> Markup:
    """One bar per key made of its parts side by side, with a legend naming the parts."""
    largest = max((sum(each) for each in values.values()), default=0.0) or 1.0
    height = BAR_HEIGHT * (len(values) + (1 if parts else 0)) + 4
    width = LABEL_WIDTH + BAR_WIDTH + VALUE_WIDTH
    rows = [_legend(parts)] if parts else []
    for index, (key, each) in enumerate(values.items(), start=1 if parts else 0):
        rows.append(_row(index, key, each, largest, shown))
    return Markup(
        f'<svg class="chart" role="img" aria-label="{escape(name)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">{"".join(rows)}</svg>'
    )


def _row(
    index: int, key: str, parts: Sequence[float], largest: float, shown: Callable[[float], str]
) -> str:
    y = index * BAR_HEIGHT
    x = float(LABEL_WIDTH)
    pieces = [f'<text x="0" y="{y + 15}" class="label">{escape(key)}</text>']
    for colour, value in zip(COLOURS, parts, strict=False):
        length = BAR_WIDTH * value / largest
        pieces.append(
            f'<rect x="{x:.1f}" y="{y + 3}" width="{length:.1f}" height="{BAR_HEIGHT - 6}" '
            f'fill="{colour}"><title>{escape(shown(value))}</title></rect>'
        )
        x += length
    total = shown(sum(parts))
    pieces.append(f'<text x="{x + 6:.1f}" y="{y + 15}" class="value">{escape(total)}</text>')
    return f'<g class="bar" data-key="{escape(key)}">{"".join(pieces)}</g>'


def _legend(parts: Sequence[str]) -> str:
    pieces, x = [], LABEL_WIDTH
    for colour, part in zip(COLOURS, parts, strict=False):
        pieces.append(f'<rect x="{x}" y="5" width="12" height="12" fill="{colour}"/>')
        pieces.append(f'<text x="{x + 16}" y="15" class="legend">{escape(part)}</text>')
        x += 150
    return "".join(pieces)
