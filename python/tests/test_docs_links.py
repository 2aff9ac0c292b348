"""Every relative link in README.md and docs/*.md names a file or folder of
the tree, and every #anchor in one names a heading of the page it points
to (GitHub's anchors: the heading in lower case, punctuation dropped, spaces
as hyphens, repeats numbered -1, -2, ...). Links to other sites are not
fetched. Text in code blocks and code spans is not read as links."""
import os
import re
import unicodedata

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGES = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                               if f.endswith(".md"))

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, code spans blanked."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").strip().lower()
    kept = []
    for ch in text:
        if ch in "-_" or ch.isalnum() or unicodedata.category(ch).startswith("M"):
            kept.append(ch)
        elif ch == " ":
            kept.append("-")
    return "".join(kept)


def anchors(path):
    """The heading anchors of the Markdown file at path."""
    seen, out = {}, set()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path, root=ROOT):
    """['LINE: TARGET: why'] for each relative link of the Markdown file at
    path that does not resolve."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    here = os.path.dirname(path)
    bad = []
    for n, line in prose_lines(text):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto: ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else os.path.normpath(os.path.join(here, file_part))
            if not os.path.exists(dest):
                bad.append(f"{n}: {target}: no such file or folder {os.path.relpath(dest, root)}")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append(f"{n}: {target}: no heading with anchor #{anchor} in {os.path.relpath(dest, root)}")
    return bad


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    bad = broken_links(os.path.join(ROOT, page))
    assert not bad, f"{page}: broken links:\n  " + "\n  ".join(bad)


def test_the_checker_finds_broken_links(tmp_path):
    """The check itself: a missing file, a missing anchor in another page and
    in the same page are found; good links, links to other sites and links
    in code are not reported."""
    (tmp_path / "other.md").write_text("# Other page\n\n## The `make test` step: twice\n\n## Repeat\n\n## Repeat\n")
    (tmp_path / "dir").mkdir()
    page = tmp_path / "page.md"
    page.write_text("# Title — with a dash\n\n"
                    "[ok](other.md) [ok](other.md#the-make-test-step-twice) [ok](other.md#repeat-1) [ok](dir)\n"
                    "[ok](#title--with-a-dash) [web](https://example.org/x.md) ![img](dir/../other.md)\n"
                    "`[in code](missing.md)`\n```\n[in a block](missing.md)\n```\n"
                    "[bad](missing.md) [bad](other.md#nothing) [bad](#nowhere)\n")
    bad = broken_links(str(page), root=str(tmp_path))
    assert [b.split(": ")[1] for b in bad] == ["missing.md", "other.md#nothing", "#nowhere"], bad
    assert all(b.startswith("9: ") for b in bad), bad
