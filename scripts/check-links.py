#!/usr/bin/env python3
"""Checks the relative links of the README and the guide (docs/): every
linked file exists and every #anchor names a heading of its page (the ids
GitHub and mdBook give headings). A page of the book (docs/) links only inside
docs/: mdBook builds those pages into HTML where a link out of the book leads
nowhere (name such files as `path` text instead), and every page of docs/ is
in the book's SUMMARY.md (mdBook builds only those). The README stays a front
page of at most 200 lines and no page of the book passes 400. Exits 1 on a broken link,
naming it.

With --html DIR (the built book, `make docs`), the links of every built page
are checked too: each leads to a file of the book and to an id on it."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"\[(?:[^\]]*)\]\(([^)\s]+)\)")


def slug(text):
    text = re.sub(r"[`*]", "", text.strip().lower())
    return "".join("-" if c.isspace() else c for c in text if c.isalnum() or c in "-_" or c.isspace())


def prose(path):
    """The lines outside code blocks."""
    inside = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            yield line


def anchors(path):
    return {slug(l.lstrip("#")) for l in prose(path) if re.match(r"^#{1,6} ", l)}


def html_links(book):
    """The broken links of the built book's pages (their <main>, not the theme's)."""
    broken = []
    for page in sorted(book.rglob("*.html")):
        if page.name in ("print.html", "404.html", "toc.html"):
            continue
        text = page.read_text()
        main = text[text.find("<main>"):text.find("</main>")]
        for href in re.findall(r'href="([^"]+)"', main):
            if re.match(r"^[a-z]+:", href):
                continue
            path, _, anchor = href.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.is_file():
                broken.append(f"{page.relative_to(book)}: {href} (no such file in the built book)")
            elif anchor and dest.suffix == ".html" and f'id="{anchor}"' not in dest.read_text():
                broken.append(f"{page.relative_to(book)}: {href} (no such id in the built book)")
    return broken


def main():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for f in files:
        for line in prose(f):
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = (f.parent / path).resolve() if path else f
                if DOCS in f.parents and DOCS not in dest.parents:
                    broken.append(f"{f.relative_to(ROOT)}: {target} (out of the book)")
                elif not dest.exists():
                    broken.append(f"{f.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{f.relative_to(ROOT)}: {target} (no such heading)")
    listed = {(DOCS / t).resolve() for t in LINK.findall((DOCS / "SUMMARY.md").read_text())}
    for page in sorted(DOCS.rglob("*.md")):
        if page.name != "SUMMARY.md" and page.resolve() not in listed:
            broken.append(f"{page.relative_to(ROOT)}: not in docs/SUMMARY.md (not built into the book)")
    for page, limit in [(ROOT / "README.md", 200), *((p, 400) for p in sorted(DOCS.rglob("*.md")))]:
        count = len(page.read_text().splitlines())
        if count > limit:
            broken.append(f"{page.relative_to(ROOT)}: {count} lines, more than {limit} (split it)")
    if len(sys.argv) == 3 and sys.argv[1] == "--html":
        broken += html_links(Path(sys.argv[2]))
    for b in broken:
        print(b)
    print(f"{len(files)} files checked, {len(broken)} problem(s) (broken links, pages out of the book, pages too long)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
