"""MkDocs hooks: the site's pages may include repository files, and may link to any file of the repository.

* A page whose whole text is ``<!-- include: PATH -->`` shows the repository file ``PATH`` (the RFCs and the README
  stay the source; their pages in ``docs/`` are one line each).
* Every relative link is resolved from where its text lives (the included file's folder for an include) and must
  name a file that exists: a page of the site, or any other file of the repository. Repository files outside
  ``docs/`` are published under ``_repo/`` (Markdown ones rendered as pages, the rest copied as they are), so a
  link to ``examples/trainers/trl/train.py`` works on the site as it does on a code host. A link to a folder goes to
  its ``README.md`` (a folder without one is named, not linked). A link to nothing fails the build, so ``mkdocs build --strict`` catches broken links.
* Math (``$...$`` inline, ``$$...$$`` as a block; ``pymdownx.arithmatex`` marks it) is turned into MathML when the
  site is built, which browsers render natively: no script, no font and nothing fetched from elsewhere.
"""

from __future__ import annotations

import html
import posixpath
import re
from pathlib import Path
from typing import Any

from latex2mathml.converter import convert as latex_to_mathml
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PUBLISHED = "_repo"  # where repository files outside docs/ live on the site
_INCLUDE = re.compile(r"^\s*<!--\s*include:\s*(?P<path>\S+)\s*-->\s*$")
_LINK = re.compile(r"(?P<bang>!?)\[(?P<label>[^\]]*)\]\((?P<target>[^)\s]+)\)")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
# what pymdownx.arithmatex (generic: true) leaves for a renderer: \(...\) inline, \[...\] as a block
_MATH = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<block>.*?)\\\])\s*</(?P=tag)>', re.S
)


def _source(src_uri: str) -> tuple[str, str]:
    """(markdown text, its repository path) of a page: the included file for an include page."""
    if src_uri.startswith(PUBLISHED + "/"):
        rel = src_uri[len(PUBLISHED) + 1 :]
        return (ROOT / rel).read_text(encoding="utf-8"), rel
    text = (DOCS / src_uri).read_text(encoding="utf-8")
    m = _INCLUDE.match(text)
    if m:
        rel = m["path"]
        if not (ROOT / rel).is_file():
            raise PluginError(f"docs/{src_uri}: includes {rel}, which does not exist")
        return (ROOT / rel).read_text(encoding="utf-8"), rel
    return text, f"docs/{src_uri}"


def _outside_code(text: str) -> list[tuple[bool, str]]:
    """The text in chunks, each flagged True when it is prose (links there are rewritten) and False in a fence."""
    chunks: list[tuple[bool, str]] = []
    prose = True
    buf: list[str] = []
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            if prose:
                chunks.append((True, "".join(buf)))
                buf = [line]
            else:
                buf.append(line)
                chunks.append((False, "".join(buf)))
                buf = []
            prose = not prose
            continue
        buf.append(line)
    chunks.append((prose, "".join(buf)))
    return chunks


def _resolve(target: str, source_rel: str, where: str) -> str | None:
    """The repository path a relative link names (a folder's README.md), None for external links and anchors."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        return None
    path = target.split("#", 1)[0]
    rel = posixpath.normpath(posixpath.join(posixpath.dirname(source_rel), path))
    full = ROOT / rel
    if full.is_dir():
        return posixpath.join(rel, "README.md") if (full / "README.md").is_file() else rel + "/"
    if rel.startswith("..") or not full.is_file():
        raise PluginError(f"{where}: broken link to {target!r} (no file {rel})")
    return rel


def _site_uri(rel: str) -> str:
    """Where a repository file is on the site, as a path under docs_dir (mirror pages for rfcs/ and README)."""
    if rel.startswith("docs/"):
        return rel[len("docs/") :]
    if rel == "README.md":
        return "index.md"
    if rel.startswith("rfcs/") and (DOCS / rel).is_file():
        return rel  # the docs/rfcs page that includes it
    return f"{PUBLISHED}/{rel}"


def _links(text: str, source_rel: str, where: str) -> list[str]:
    return [
        rel
        for prose, chunk in _outside_code(text)
        if prose
        for m in _LINK.finditer(chunk)
        if (rel := _resolve(m["target"], source_rel, where)) is not None
    ]


def on_files(files: Files, config: Any) -> Files:
    """Publish every repository file that a page links to (and, for Markdown ones, what they link to)."""
    queue = [f.src_uri for f in files.documentation_pages()]
    seen = set(queue)
    while queue:
        src_uri = queue.pop()
        text, source_rel = _source(src_uri)
        for rel in _links(text, source_rel, f"{source_rel}"):
            uri = _site_uri(rel)
            if rel.endswith("/") or uri in seen or not uri.startswith(PUBLISHED + "/"):
                continue
            seen.add(uri)
            files.append(File.generated(config, uri, abs_src_path=str(ROOT / rel)))
            if rel.endswith(".md"):
                queue.append(uri)
    return files


def on_page_read_source(page: Any, config: Any) -> str | None:
    """Include pages and published Markdown files read their repository source."""
    src_uri = page.file.src_uri
    if not src_uri.startswith(PUBLISHED + "/") and _INCLUDE.match((DOCS / src_uri).read_text(encoding="utf-8")):
        return _source(src_uri)[0]
    return None


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Rewrite each relative link from where its text lives to where its target is on the site."""
    src_uri = page.file.src_uri
    _, source_rel = _source(src_uri)
    page_dir = posixpath.dirname(src_uri)

    def fix(m: re.Match[str]) -> str:
        rel = _resolve(m["target"], source_rel, source_rel)
        if rel is None:
            return m.group(0)
        if rel.endswith("/"):  # a folder without a README: named, not linked (a site has no folder listings)
            return f"{m['label']} (`{rel}`)"
        anchor = "#" + m["target"].split("#", 1)[1] if "#" in m["target"] else ""
        target = posixpath.relpath(_site_uri(rel), page_dir or ".") + anchor
        return f"{m['bang']}[{m['label']}]({target})"

    return "".join(_LINK.sub(fix, chunk) if prose else chunk for prose, chunk in _outside_code(markdown))


def on_page_content(html_text: str, page: Any, config: Any, files: Files) -> str:
    """Math as MathML, rendered by the browser itself (no script or font from anywhere)."""

    def render(m: re.Match[str]) -> str:
        tex = html.unescape(m["inline"] if m["inline"] is not None else m["block"])
        return latex_to_mathml(tex.strip(), display="inline" if m["inline"] is not None else "block")

    return _MATH.sub(render, html_text)
