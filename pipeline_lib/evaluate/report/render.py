"""Rendering: the same sections to Markdown (``report.md``) and to HTML (``index.html``), so the
two files cannot disagree."""

from __future__ import annotations

import html
import re

from pipeline_lib.evaluate.report.document import NA, Figure, Section, Table, Text


def to_markdown(title: str, sections: list[Section]) -> str:
    out = [f"# {title}", ""]
    for section in sections:
        out += [f"## {section.title}", ""]
        for b in section.blocks:
            if isinstance(b, Figure):
                out += [f"![{b.alt}]({b.src})", ""]
            elif isinstance(b, Text):
                out += [line for p in b.paragraphs for line in (p, "")]
            else:
                if b.title != section.title:
                    out += [f"### {b.title}", ""]
                out += ["| " + " | ".join(b.header) + " |", "|" + "---|" * len(b.header)]
                out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"
                        for r in b.rows]
                out.append("")
            out += [f"- {n}" for n in b.notes] + ([""] if b.notes else [])
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1300px;padding:0 1em;
color:#222}h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ccc}
nav a{margin-right:1em}.wide{overflow-x:auto}
table{border-collapse:collapse;margin:.6em 0;font-variant-numeric:tabular-nums;font-size:14px}
td,th{border:1px solid #bbb;padding:3px 8px;text-align:left;white-space:nowrap}
th{background:#eee;white-space:normal;vertical-align:bottom}.num{text-align:right}
tr:nth-child(even){background:#f8f8f8}
.notes{font-size:13px;color:#444;max-width:1100px}figure{margin:1em 0}img{max-width:100%}"""


def _numeric_columns(t: Table) -> list[bool]:
    """Columns whose every known cell starts with a number: right-aligned, text left."""
    return [all(c == "" or c.startswith(NA) or re.match(r"[+-]?\d", c) for c in column)
            for column in zip(*t.rows)] if t.rows else [False] * len(t.header)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower())


def to_html(title: str, sections: list[Section]) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>",
           "<nav>" + "".join(f'<a href="#{_slug(s.title)}">{e(s.title)}</a>' for s in sections)
           + "</nav>"]
    for section in sections:
        out.append(f'<h2 id="{_slug(section.title)}">{e(section.title)}</h2>')
        for b in section.blocks:
            if isinstance(b, Figure):
                out.append(f'<figure><img src="{e(b.src)}" alt="{e(b.alt)}"></figure>')
            elif isinstance(b, Text):
                out += [f"<p>{e(p)}</p>" for p in b.paragraphs]
            else:
                if b.title != section.title:
                    out.append(f"<h3>{e(b.title)}</h3>")
                num = _numeric_columns(b)
                td = ['<td class="num">' if n else "<td>" for n in num]
                out.append('<div class="wide"><table><thead><tr>'
                           + "".join(f'<th class="num">{e(h)}</th>' if n else f"<th>{e(h)}</th>"
                                     for h, n in zip(b.header, num))
                           + "</tr></thead><tbody>")
                out += ["<tr>" + "".join(f"{d}{e(c)}</td>" for d, c in zip(td, r)) + "</tr>"
                        for r in b.rows]
                out.append("</tbody></table></div>")
            if b.notes:
                out.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in b.notes)
                           + "</ul>")
    out.append("</body></html>")
    return "\n".join(out)
