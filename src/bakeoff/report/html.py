"""One self-contained page: the Markdown report as HTML with every plot inlined as a data URI (no external URL)."""

from __future__ import annotations

import base64
import html as h
import re
from pathlib import Path


def html(markdown_text: str, images: dict[str, Path]) -> str:
    """A self-contained page: the Markdown report as HTML, every plot inlined as a data URI (no external URL)."""
    def inline(text: str) -> str:
        text = h.escape(text)
        text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)

    body, table, in_list = [], [], False

    def flush_table():
        if not table:
            return
        rows = [r for r in table if not re.fullmatch(r"\|(-+\|)+", r.replace(" ", ""))]
        cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
        out = ["<table>", "<tr>" + "".join(f"<th>{inline(c)}</th>" for c in cells[0]) + "</tr>"]
        out += ["<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in cells[1:]]
        body.append("\n".join(out + ["</table>"]))
        table.clear()

    for line in markdown_text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        if line.startswith("- "):
            if not in_list:
                body.append("<ul>")
                in_list = True
            body.append(f"<li>{inline(line[2:])}</li>")
            continue
        if in_list:
            body.append("</ul>")
            in_list = False
        m = re.match(r"(#+) (.*)", line)
        if line.startswith("> "):
            body.append(f"<blockquote>{inline(line[2:])}</blockquote>")
        elif m:
            level = len(m.group(1))
            body.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
        elif line.strip():
            body.append(f"<p>{inline(line)}</p>")
    flush_table()
    if in_list:
        body.append("</ul>")
    body.append("<h2>Plots</h2>")
    for name, path in images.items():
        data = base64.b64encode(Path(path).read_bytes()).decode()
        body.append(f'<figure><img alt="{name}" src="data:image/png;base64,{data}"><figcaption>{name}</figcaption></figure>')
    style = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
             "text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}code{background:#f3f3f3;"
             "padding:0 3px}img{max-width:100%}figure{display:inline-block;margin:0.5em}")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>bakeoff comparison</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
