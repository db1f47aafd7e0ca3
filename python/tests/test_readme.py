"""Every Python example of python/README.md and of the guide's Python pages
(docs/guide/client-python.md, docs/guide/many-names.md,
docs/guide/election.md) runs against the test
nodes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
GUIDE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "client-python.md"
MANY_PAGE = GUIDE_PAGE.with_name("many-names.md")
ELECTION_PAGE = GUIDE_PAGE.with_name("election.md")


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


BLOCKS = python_blocks(README)
GUIDE_BLOCKS = python_blocks(GUIDE_PAGE)
MANY_BLOCKS = python_blocks(MANY_PAGE)
ELECTION_BLOCKS = python_blocks(ELECTION_PAGE)
NODES = re.compile(r"^NODES = \[.*?\]$", flags=re.S | re.M)
RESOURCE = re.compile(r'^RESOURCE = "[^"]*"', flags=re.M)


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3
    assert any("fence_token <= ?" in b for b in BLOCKS)
    assert any("StaleTokenError" in b and RESOURCE.search(b) for b in BLOCKS)


def test_the_guide_page_has_examples() -> None:
    assert len(GUIDE_BLOCKS) >= 1
    assert any("lock.token" in b for b in GUIDE_BLOCKS)
    assert any("redlock.campaign(" in b for b in ELECTION_BLOCKS)


EXAMPLES = (
    [("README.md", b) for b in BLOCKS]
    + [("docs/guide/client-python.md", b) for b in GUIDE_BLOCKS]
    + [("docs/guide/many-names.md", b) for b in MANY_BLOCKS]
    + [("docs/guide/election.md", b) for b in ELECTION_BLOCKS]
)


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_readme_example_runs(urls: list[str], resource: str, index: int) -> None:
    origin, block = EXAMPLES[index]
    source, count = NODES.subn(f"NODES = {urls!r}", block)
    assert count == 1, "each example defines NODES once"
    # An example of fenced commands names its resource server once.
    source, count = RESOURCE.subn(f"RESOURCE = {resource!r}", source)
    assert count <= 1
    namespace: dict[str, object] = {"__name__": f"readme_example_{index}"}
    exec(compile(source, f"{origin} example {index}", "exec"), namespace)
