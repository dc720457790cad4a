"""A small table for notebooks: HTML in JupyterLab, aligned text elsewhere (and in nbval's comparison).

    Table([{"format": "fp16", "max": 65504.0}], formats={"max": "{:.6g}"})
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any


class Table:
    """Rows of dicts shown as a table; ``formats`` maps a column to a format string or a function."""

    def __init__(self, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None,
                 formats: dict[str, str | Callable[[Any], str]] | None = None, title: str = "") -> None:
        if not isinstance(rows, Sequence) or not all(isinstance(r, dict) for r in rows):
            raise TypeError("rows must be a list of dicts")
        self.rows = list(rows)
        self.columns = list(columns) if columns is not None else (list(self.rows[0]) if self.rows else [])
        unknown = [c for c in self.columns if any(c not in r for r in self.rows)]
        if unknown:
            raise ValueError(f"columns {unknown} are missing from some rows")
        self.formats = formats or {}
        self.title = title

    def cell(self, row: dict[str, Any], column: str) -> str:
        value = row[column]
        fmt = self.formats.get(column)
        if fmt is None:
            return "—" if value is None else str(value)
        return fmt(value) if callable(fmt) else fmt.format(value)

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
