"""MkDocs hook: pages that live elsewhere in the repository join the site, and links keep working.

The README, ARCHITECTURE.md and the component READMEs stay where a reader of the
repository looks for them; the site takes them as they are (no copies to drift).
Every page is written for the repository: its links are relative to its own place
there (``../ARCHITECTURE.md``, ``docs/trainers.md``). This hook rewrites each such link
to the page's place in the site, and a link to a file the site does not carry (a
sample manifest, a Dockerfile) to its repository path in plain text, so that
``mkdocs build --strict`` checks every link that remains.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

REPOSITORY = Path(__file__).resolve().parents[2]
# MkDocs counts warnings of its plugins' loggers: under --strict one fails the build.
log = logging.getLogger(f"mkdocs.plugins.{__name__}")

# Repository file -> its page in the site.
PAGES_ELSEWHERE = {
    "README.md": "index.md",
    "ARCHITECTURE.md": "architecture.md",
    "runtimes/gateway/README.md": "gateway.md",
    "charts/reward-operator/README.md": "chart.md",
    "manifests/README.md": "manifests.md",
}
_SOURCE_OF_PAGE = {page: source for source, page in PAGES_ELSEWHERE.items()}

_LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")
_EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|#|/)", re.I)
_FENCE = re.compile(r"^\s*(```|~~~)")


def on_files(files: Files, config) -> Files:
    for source, page in PAGES_ELSEWHERE.items():
        files.append(File.generated(config, page, abs_src_path=str(REPOSITORY / source)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    return rewrite_links(markdown, page.file.src_uri)


def rewrite_links(markdown: str, page: str) -> str:
    """Links of ``page`` (its path in the site) rewritten from repository paths to site paths."""
    source = _SOURCE_OF_PAGE.get(page, f"docs/{page}")
    lines, in_fence = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        lines.append(line if in_fence else _LINK.sub(lambda m: _rewrite(m, source, page), line))
    return "\n".join(lines)


def _rewrite(match: re.Match, source: str, page: str) -> str:
    target = match.group("target")
    if _EXTERNAL.match(target):
        return match.group(0)
    path, _, anchor = target.partition("#")
    in_repository = posixpath.normpath(posixpath.join(posixpath.dirname(source), path)).rstrip("/")
    site_page = PAGES_ELSEWHERE.get(in_repository)
    if site_page is None and in_repository.startswith("docs/"):
        site_page = in_repository.removeprefix("docs/")
    if site_page is None:
        if not (REPOSITORY / in_repository).exists():
            log.warning(f"{source} links {target}, which is not in the repository")
        text = match.group("text")
        return text if text.strip("`") == in_repository else f"{text} (`{in_repository}`)"
    relative = posixpath.relpath(site_page, posixpath.dirname(page) or ".")
    return f"[{match.group('text')}]({relative}{'#' + anchor if anchor else ''})"
