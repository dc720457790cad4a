"""A small table for notebooks: HTML in JupyterLab, aligned text elsewhere (and in nbval's comparison).

    Table([{"format": "fp16", "max": 65504.0}], formats={"max": "{:.6g}"})
"""

from __future__ import annotations

import html
import string
from collections.abc import Callable, Sequence
from typing import Any


class Table:
    """Rows of dicts shown as a table; ``formats`` maps a column to a format string or a function."""

    def __init__(self, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None,
                 formats: dict[str, str | Callable[[Any], str]] | None = None, title: str = "") -> None:
        if not isinstance(rows, Sequence) or not all(isinstance(r, dict) for r in rows):
            raise TypeError("rows must be a list of dicts")
        self.rows = list(rows)
        self.columns = _check_columns(columns) if columns is not None else (list(self.rows[0]) if self.rows else [])
        unknown = [c for c in self.columns if any(c not in r for r in self.rows)]
        if unknown:
            raise ValueError(f"columns {unknown} are missing from some rows")
        self.formats = _check_formats(formats, self.columns, self.rows)
        if not isinstance(title, str):
            raise TypeError(f"title must be a str (got {type(title).__name__})")
        self.title = title

    def cell(self, row: dict[str, Any], column: str) -> str:
        value = row[column]
        fmt = self.formats.get(column)
        if fmt is None:
            return "—" if value is None else str(value)
        return _apply(fmt, value, column)

    def text(self) -> str:
        if not self.rows:
            return "\n".join([self.title, "(no rows)"] if self.title else ["(no rows)"])
        cells = [[self.cell(r, c) for c in self.columns] for r in self.rows]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(self.columns)]
        lines = [self.title] if self.title else []
        lines.append("  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def numeric(self, column: str) -> bool:
        """Whether every value of ``column`` is a number (right-aligned in HTML; text is left-aligned)."""
        values = [r[column] for r in self.rows if r[column] is not None]
        return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)

    def _repr_html_(self) -> str:
        """An HTML table that fits its cell: text columns left-aligned, numbers right-aligned, column widths
        from the content (JupyterLab's default ``table-layout: fixed`` lets wide content spill out of its
        cell), and a horizontal scroll bar, never clipping, if it is still wider than the notebook."""
        align = {c: "right" if self.numeric(c) else "left" for c in self.columns}
        # A header may break after an underscore (smallest_<wbr>subnormal): narrow number columns.
        head = "".join(f'<th style="text-align:{align[c]}">{html.escape(c).replace("_", "_<wbr>")}</th>'
                       for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f'<td style="text-align:{align[c]}">{html.escape(self.cell(r, c))}</td>'
                             for c in self.columns) + "</tr>"
            for r in self.rows)
        caption = (f'<caption style="text-align:left;caption-side:top">{html.escape(self.title)}</caption>'
                   if self.title else "")
        return (f'<div class="ampcourse-table" style="max-width:100%;overflow-x:auto">'
                f'<table style="table-layout:auto;margin-left:0">{caption}<thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table></div>")


MAX_CELL = 10_000  # characters: a format such as '{:>100000000}' would build a 200 MB cell


def _check_columns(columns: Any) -> list[str]:
    """``columns`` as a list of distinct column names (a str is one name split into letters: refused)."""
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
        raise TypeError(f"columns must be a list of column names such as ['format', 'max'] (got {columns!r}; "
                        "a single str would be split into one column per character)")
    names = list(columns)
    if not all(isinstance(c, str) for c in names):
        raise TypeError(f"columns must be a list of str (got {names!r})")
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        raise ValueError(f"columns must not repeat a name: {repeated} appear(s) more than once in {names}")
    return names


def _apply(fmt: str | Callable[[Any], str], value: Any, column: str) -> str:
    """``value`` through ``fmt``; a format that cannot show it is a ``ValueError`` naming the column."""
    try:
        text = fmt(value) if callable(fmt) else fmt.format(value)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise ValueError(f"formats[{column!r}] = {fmt!r} cannot format the value {value!r} "
                         f"({type(err).__name__}: {err})") from None
    text = text if isinstance(text, str) else str(text)
    if len(text) > MAX_CELL:
        raise ValueError(f"formats[{column!r}] = {fmt!r} makes a cell of {len(text):,} characters from {value!r} "
                         f"(at most {MAX_CELL:,}): use a smaller width")
    return text


def _has_field(fmt: str) -> bool:
    """Whether ``fmt`` has a replacement field (``'{{}}'`` is an escaped brace: it prints ``{}`` for any value)."""
    try:
        return any(field is not None for _, field, _, _ in string.Formatter().parse(fmt))
    except ValueError:  # an unmatched brace: str.format names it when the format is tried
        return "{" in fmt


def _check_formats(formats: Any, columns: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``formats`` checked at once (not when the table is first shown): a dict from a column of the table to a
    format string with one ``{}`` field, such as ``"{:.2f}"``, or to a function of the value; each format is tried
    on every value of its column."""
    if formats is None:
        return {}
    if not isinstance(formats, dict):
        raise TypeError(f"formats must be a dict from column name to a format string or a function "
                        f"(got {type(formats).__name__})")
    if columns:
        unknown = [c for c in formats if c not in columns]
        if unknown:
            raise ValueError(f"formats names columns that this table does not have: {unknown}; "
                             f"its columns are {columns}")
    for column, fmt in formats.items():
        if isinstance(fmt, str):
            if "{" not in fmt:
                raise ValueError(f"formats[{column!r}] = {fmt!r} is not a format string: write it with a "
                                 f"replacement field, e.g. '{{:{fmt}}}' (a str.format pattern)")
            if not _has_field(fmt):
                raise ValueError(f"formats[{column!r}] = {fmt!r} has no replacement field ('{{{{' and '}}}}' are "
                                 "escaped braces, so every value would print the same): write one such as '{:.2f}'")
        elif not callable(fmt):
            raise TypeError(f"formats[{column!r}] must be a format string such as '{{:.2f}}' or a function "
                            f"(got {type(fmt).__name__})")
        for row in rows:
            if column in row:
                _apply(fmt, row[column], column)
    return dict(formats)
