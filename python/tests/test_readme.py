"""Every Python example of python/README.md runs against the test nodes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
NODES = re.compile(r"^NODES = \[.*?\]$", flags=re.S | re.M)
RESOURCE = re.compile(r'^RESOURCE = "[^"]*"', flags=re.M)


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3
    assert any("fence_token <= ?" in b for b in BLOCKS)
    assert any("StaleTokenError" in b and RESOURCE.search(b) for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(urls: list[str], resource: str, index: int) -> None:
    source, count = NODES.subn(f"NODES = {urls!r}", BLOCKS[index])
    assert count == 1, "each example defines NODES once"
    # An example of fenced commands names its resource server once.
    source, count = RESOURCE.subn(f"RESOURCE = {resource!r}", source)
    assert count <= 1
    namespace: dict[str, object] = {"__name__": f"readme_example_{index}"}
    exec(compile(source, f"README.md example {index}", "exec"), namespace)
