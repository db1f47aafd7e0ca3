"""Fixtures: five local module nodes (started once per session), clients."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

import redlock_fenced as rf
from nodes import Node


@pytest.fixture(scope="session")
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    try:
        for _ in range(5):
            started.append(Node())
        yield started
    finally:
        for node in started:
            node.close()


@pytest.fixture(scope="session")
def resource_node() -> Iterator[Node]:
    """One more module node, not a lock member: the server of fenced resources."""
    node = Node()
    try:
        yield node
    finally:
        node.close()


@pytest.fixture
def resource(resource_node: Node) -> str:
    """The resource server's URL."""
    if resource_node.proc is None:
        resource_node.start()
    return resource_node.url


@pytest.fixture(autouse=True)
def _healthy(nodes: list[Node]) -> Iterator[None]:
    """Every test starts and ends with all five nodes running."""
    yield
    for node in nodes:
        if node.paused:
            node.resume()
        if node.proc is None:
            node.start()


@pytest.fixture
def urls(nodes: list[Node]) -> list[str]:
    return [n.url for n in nodes]


@pytest.fixture
def key() -> str:
    return f"py-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redlock(urls: list[str]) -> Iterator[rf.Redlock]:
    with rf.Redlock.connect(urls) as client:
        yield client


@pytest.fixture
async def aredlock(urls: list[str]) -> AsyncIterator[rf.AsyncRedlock]:
    async with await rf.AsyncRedlock.connect(urls) as client:
        yield client
