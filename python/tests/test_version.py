"""The package's version is the project's: the workspace's Cargo.toml, the
module's `INFO redlock` field and its `MODULE LIST` number agree."""

from __future__ import annotations

import tomllib
from pathlib import Path

import redlock_fenced as rf
from nodes import Node, command

WORKSPACE = Path(__file__).resolve().parents[2] / "Cargo.toml"


def test_the_package_version_is_the_workspace_version(nodes: list[Node]) -> None:
    workspace = tomllib.loads(WORKSPACE.read_text())["workspace"]["package"]["version"]
    assert rf.__version__ == workspace
    info = command(nodes[0].port, "INFO", "redlock").decode()
    assert f"redlock_version:{workspace}" in info
    major, minor, patch = (int(p) for p in workspace.split("."))
    modules = command(nodes[0].port, "MODULE", "LIST").decode()
    assert f"\r\n:{major * 10000 + minor * 100 + patch}\r\n" in modules
