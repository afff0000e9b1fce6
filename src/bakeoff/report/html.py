"""One self-contained page: the Markdown report rendered by markdown-it-py into a Jinja2 template, with a table of
contents from its sections and every plot inlined beside its table as a data URI (no external URL)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,-apple-system,sans-serif;max-width:1180px;margin:1.5em auto;padding:0 1em;
  color:#1d1d1f;line-height:1.45}
nav.toc{background:#f6f7f9;border:1px solid #e1e4e8;border-radius:6px;padding:.6em 1em;margin:1em 0;font-size:14px}
nav.toc ol{margin:.3em 0;padding-left:1.4em;columns:2}
table{border-collapse:collapse;font-size:13px;margin:.8em 0;display:block;overflow-x:auto}
td,th{border:1px solid #d0d7de;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f3f4f6}td:first-child,th:first-child{text-align:left}
h2#answer+table{display:table;font-size:15px}h2#answer+table td,h2#answer+table th{white-space:normal;text-align:left}
h2#answer+table td:first-child{white-space:nowrap}
.answers table{display:table;width:100%}.answers td{white-space:normal;text-align:left;overflow-wrap:anywhere}
.answers td:first-child{white-space:nowrap}.answers td:last-child{text-align:right}.answers th{text-align:left}
pre{white-space:pre-wrap;background:#f6f7f9;padding:.5em;font-size:13px}
code{background:#f3f4f6;padding:0 3px;border-radius:3px;font-size:92%}
img{max-width:48%;vertical-align:top;margin:.3em .5%;border:1px solid #eee}
details{margin:.6em 0}summary{cursor:pointer;color:#0550ae}
h2{border-bottom:1px solid #e1e4e8;padding-bottom:.2em;margin-top:1.6em}
blockquote{border-left:4px solid #d4a72c;margin:1em 0;padding:.2em 1em;background:#fff8e5}
</style></head>
<body>
{{ first }}
<nav class="toc"><strong>Contents</strong><ol>
{% for id, text in toc %}<li><a href="#{{ id }}">{{ text }}</a></li>
{% endfor %}</ol></nav>
{{ rest }}
</body></html>
"""


def slug(text: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text.strip().lower()))


def html(markdown_text: str, images: dict[str, Path]) -> str:
    """The page: markdown-it-py (CommonMark with tables, raw HTML such as <details> kept) into the template; the
    first section (the verdict) before the contents, every ``plots/<name>.png`` image inlined."""
    from jinja2 import Environment
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    tokens = md.parse(markdown_text)
    toc = []
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            text = tokens[i + 1].content
            t.attrSet("id", slug(text))
            if t.tag == "h2":
                toc.append((slug(text), re.sub(r"[`*]", "", text)))
    body = md.renderer.render(tokens, md.options, {})
    by_file = {Path(p).name: p for p in images.values()}

    def inline(m: re.Match) -> str:
        path = by_file.get(Path(m.group(1)).name)
        if path is None:
            return m.group(0)
        return 'src="data:image/png;base64,' + base64.b64encode(Path(path).read_bytes()).decode() + '"'

    body = re.sub(r'src="(plots/[^"]+\.png)"', inline, body)
    cut = body.find("<h2", body.find("<h2") + 1)  # the verdict's section ends at the second h2
    first, rest = (body[:cut], body[cut:]) if cut > 0 else (body, "")
    env = Environment(autoescape=False)
    return env.from_string(TEMPLATE).render(title="bakeoff comparison", first=first, rest=rest, toc=toc[1:]) + "\n"
