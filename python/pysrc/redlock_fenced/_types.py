"""Option types, node views and the checks of durations."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from collections.abc import Iterable, Sequence
from typing import Literal, TypeAlias

from .errors import InvalidArgumentError

__all__ = ["Arg", "Cluster", "Member", "NodeView", "Resource", "RetryPolicy", "Seconds", "Sentinel"]

Seconds: TypeAlias = float | int | timedelta
"""A duration in seconds: finite and above zero. The nodes get whole
milliseconds (rounded down)."""

Arg: TypeAlias = str | bytes | bytearray | memoryview | int | float
"""An argument of a fenced command: `str` is sent as UTF-8, `int` and
`float` as their decimal text (`bool` is refused, as in redis-py)."""

DAY = 86_400.0
"""The longest ttl or wait accepted (the module's ceiling for
`redlock.max-ttl-ms`)."""


def seconds(name: str, value: object, *, minimum: float, maximum: float = DAY,
            allow_minimum: bool = True) -> float:
    """`value` as float seconds, checked: a `TypeError` for anything but
    int, float or timedelta, an `InvalidArgumentError` outside the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise TypeError(
            f"{name} must be seconds as an int, float or timedelta, got {type(value).__name__}"
        )
    if isinstance(value, int) and not minimum <= value <= maximum:
        raise InvalidArgumentError(
            f"invalid argument: {name} must be from {minimum} to {maximum} seconds, got {value}"
        )
    s = value.total_seconds() if isinstance(value, timedelta) else float(value)
    too_low = s < minimum or (s == minimum and not allow_minimum)
    if not math.isfinite(s) or too_low or s > maximum:
        bound = "from" if allow_minimum else "above"
        raise InvalidArgumentError(
            f"invalid argument: {name} must be a finite number of seconds {bound} {minimum} "
            f"up to {maximum}, got {value!r}"
        )
    return s


def ttl_seconds(value: object) -> float:
    """A lease: at least 1 ms, at most one day."""
    # The usual case without the general checks (a NaN fails the comparison).
    if (type(value) is float or type(value) is int) and 0.001 <= value <= DAY:
        return float(value)
    return seconds("ttl", value, minimum=0.001)


def wait_seconds(value: object) -> float | None:
    """How long to wait for a busy lock: None (do not wait), or 0 up to one day."""
    if value is None:
        return None
    return seconds("wait", value, minimum=0.0)


def check_key(key: object) -> str:
    """A lock key must be a str."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    return key


def check_fenced(resource: object, guard: object) -> tuple[str | list[str], str]:
    """The resource (a server's URL, or a `Cluster` given to the native layer
    as its seed list) and the guard key, checked."""
    if isinstance(resource, Cluster):
        target: str | list[str] = list(resource.seeds)
    elif isinstance(resource, str):
        target = resource
    else:
        raise TypeError(
            "resource must be the resource server's URL as a str or a Cluster, got "
            f"{type(resource).__name__}"
        )
    if not isinstance(guard, str):
        raise TypeError(f"guard must be a str, got {type(guard).__name__}")
    return target, guard


def transaction_args(commands: object) -> list[list[bytes]]:
    """The commands of a fenced transaction (a sequence of sequences of
    arguments) as the bytes sent."""
    if isinstance(commands, (str, bytes, bytearray, memoryview)) or not isinstance(
        commands, Iterable
    ):
        raise TypeError(
            "commands must be a list of commands, each a list of its name and arguments"
        )
    out: list[list[bytes]] = []
    for command in commands:
        if isinstance(command, (str, bytes, bytearray, memoryview)) or not isinstance(
            command, Sequence
        ):
            raise TypeError(
                "each command of a fenced transaction must be a list or tuple of its name and "
                f"arguments, got {type(command).__name__}"
            )
        out.append(command_args(tuple(command)))
    if not out:
        raise InvalidArgumentError("invalid argument: a fenced transaction needs a command")
    return out


def command_args(args: tuple[object, ...]) -> list[bytes]:
    """A fenced command's name and arguments as the bytes sent."""
    if not args:
        raise InvalidArgumentError("invalid argument: a fenced command needs a command name")
    out: list[bytes] = []
    for arg in args:
        if isinstance(arg, bytes):
            out.append(arg)
        elif isinstance(arg, str):
            out.append(arg.encode())
        elif isinstance(arg, (bytearray, memoryview)):
            out.append(bytes(arg))
        elif isinstance(arg, bool):
            raise TypeError("a command argument cannot be a bool: send 0/1 or a string")
        elif isinstance(arg, int):
            out.append(str(arg).encode())
        elif isinstance(arg, float):
            out.append(repr(arg).encode())
        else:
            raise TypeError(
                "a command argument must be str, bytes, int or float, got "
                f"{type(arg).__name__}"
            )
    return out


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How `acquire` (without `wait`) retries a busy lock, a missing quorum or
    nodes in their restart window: `attempts` in all, `base_delay` plus a
    random `0..jitter` apart (seconds)."""

    attempts: int = 3
    base_delay: Seconds = 0.1
    jitter: Seconds = 0.1

    @classmethod
    def no_retry(cls) -> RetryPolicy:
        """One attempt, no retry."""
        return cls(attempts=1)


@dataclass(frozen=True, slots=True, init=False)
class Cluster:
    """A quorum member that is a Redis Cluster, given by the URLs of some of
    its nodes: `Cluster("redis://10.0.1.1:7000", "redis://10.0.1.2:7000")`.
    It has one vote, like a single node. It can also be the resource of
    fenced commands (`Lock.fenced`)."""

    seeds: tuple[str, ...]

    def __init__(self, *seeds: str) -> None:
        if not seeds:
            raise InvalidArgumentError("invalid argument: a Cluster needs at least one seed URL")
        for seed in seeds:
            if not isinstance(seed, str):
                raise TypeError(f"cluster seeds must be str URLs, got {type(seed).__name__}")
        object.__setattr__(self, "seeds", tuple(seeds))


@dataclass(frozen=True, slots=True, init=False)
class Sentinel:
    """A quorum member that is one master with replicas behind Redis
    Sentinel: the master's name in Sentinel and the URLs of some of the
    sentinels, `Sentinel("locks", "redis://10.0.0.1:26379", …)` (their own
    scheme and credentials). The client asks the sentinels for the master
    and follows failovers. The data nodes' credentials and TLS are their own
    (`data_user`, `data_password`, `data_tls`). One vote, like a node; alone
    it is the common deployment. With `redlock.sync-replicas` set on its
    nodes, every grant is confirmed by every replica before it counts, and a
    failover keeps the locks."""

    name: str
    sentinels: tuple[str, ...]
    data_user: str | None
    data_password: str | None = field(repr=False)
    data_tls: bool

    def __init__(
        self,
        name: str,
        *sentinels: str,
        data_user: str | None = None,
        data_password: str | None = None,
        data_tls: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(
                "invalid argument: a Sentinel needs the master's name (as in `sentinel monitor NAME …`)"
            )
        if not sentinels:
            raise InvalidArgumentError("invalid argument: a Sentinel needs at least one sentinel URL")
        for url in sentinels:
            if not isinstance(url, str):
                raise TypeError(f"sentinel URLs must be str, got {type(url).__name__}")
        for what, value in (("data_user", data_user), ("data_password", data_password)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{what} must be a str, got {type(value).__name__}")
        if not isinstance(data_tls, bool):
            raise TypeError("data_tls must be a bool")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "sentinels", tuple(sentinels))
        object.__setattr__(self, "data_user", data_user)
        object.__setattr__(self, "data_password", data_password)
        object.__setattr__(self, "data_tls", data_tls)


Member: TypeAlias = str | Cluster | Sentinel
"""A quorum member: a node's URL, a `Cluster`, or a `Sentinel`."""

Resource: TypeAlias = str | Cluster
"""Where fenced commands run: a server's URL (`redis://host:port`,
`rediss://…` with the client's TLS files), or a `Cluster` of seed URLs."""


@dataclass(frozen=True, slots=True)
class NodeView:
    """One member's view of a lock (see `Redlock.inspect`): `state` is
    "missing" (never locked there), "present" (`held`, `ttl` seconds left when
    held, the node's `token` counter) or "error" (`error` says why). For a
    cluster member, `shard` is the `(address, node id)` that holds the key."""

    node: str
    state: Literal["missing", "present", "error"]
    held: bool = False
    ttl: float | None = None
    token: int | None = None
    error: str | None = None
    shard: tuple[str, str] | None = None
