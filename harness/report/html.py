"""The frame of every page harness writes: one self-contained HTML file (no network, no CDN; it opens
from `file://`), a Content-Security-Policy that lets only this page's own script and style run, and
one escaping function for everything that comes from a repository or a model.

The policy allows scripts and styles by the SHA-256 of the page's own `<script>` and `<style>`
blocks, so anything that slipped into the page (a `<script>` in a file, an `onerror=` attribute, a
`javascript:` link) is refused by the browser even if it were not escaped. Pages carry no inline
event handlers and no `style=` attributes for the same reason.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from harness.report import assets


def esc(text: object) -> str:
    """Untrusted text as inert HTML (quotes too, so it is safe inside attribute values)."""
    return html.escape(str(text), quote=True)


def _digest(block: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(block.encode("utf-8")).digest()).decode("ascii") + "'"


SCRIPT, STYLE = assets.SCRIPT, assets.STYLE
CSP = (
    "default-src 'none'; "
    f"script-src {_digest(SCRIPT)}; "
    f"style-src {_digest(STYLE)}; "
    "img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'"
)
"""The page's policy (in a meta element, so it holds from `file://` too)."""
HEADER_CSP = f"{CSP}; frame-ancestors 'none'"
"""What `harness view --serve` sends as a header: the same, and no framing (which only a header can say)."""


def page(title: str, body: str, *, heading: str | None = None) -> str:
    """A whole page around body (already-escaped HTML)."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n"
        f"<style>{STYLE}</style>\n"
        "</head><body>\n"
        f"<header><h1>{esc(heading or title)}</h1></header>\n<main>\n{body}\n</main>\n"
        f"<script>{SCRIPT}</script>\n"
        "</body></html>\n"
    )


def table(
    headers: Iterable[str],
    rows: Iterable[Iterable[tuple[str, object]]],
    *,
    sortable: bool = True,
    classes: str = "",
) -> str:
    """A table; each cell is (html, sort key). Sortable tables sort by the key when a header is clicked
    (numbers as numbers, the rest as text); keys are escaped here, the html must be already."""
    head = "".join(
        f'<th scope="col"><button type="button" class="sort">{esc(h)}</button></th>'
        if sortable
        else f"<th>{esc(h)}</th>"
        for h in headers
    )
    body = []
    for row in rows:
        cells = "".join(f'<td data-v="{esc("" if key is None else key)}">{cell}</td>' for cell, key in row)
        body.append(f"<tr>{cells}</tr>")
    cls = " ".join(c for c in ("sortable" if sortable else "", classes) if c)
    made = f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return f'<div class="table-wrap">{made}</div>'  # long ids wrap; what still does not fit scrolls, not the page


def relative_href(target: Path, from_dir: Path) -> str:
    """A relative URL from a page in from_dir to target (path segments percent-encoded)."""
    rel = os.path.relpath(target, from_dir)
    return "/".join(quote(part) for part in Path(rel).parts)
