"""Property tests: any duration input gives a value or a clean error, and a
state machine over acquire/try/extend/release keeps tokens increasing and at
most one live owner per key."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import redlock_fenced as rf

durations = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.timedeltas(min_value=timedelta(days=-3), max_value=timedelta(days=3)),
    st.floats(min_value=0.0005, max_value=0.01),
)


def outcome_is_clean(call: object) -> None:
    """The call either works or raises InvalidArgumentError (or, for a ttl of
    a few ms, ExpiredBeforeUseError): never a Rust panic exception (a
    BaseException) or anything else."""
    assert callable(call)
    try:
        result = call()
    except (rf.InvalidArgumentError, rf.ExpiredBeforeUseError):
        return
    if isinstance(result, (rf.Lock, rf.AsyncLock)):
        if isinstance(result, rf.Lock):
            result.release()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=durations)
def test_any_sync_duration_is_a_value_or_invalid_argument(
    redlock: rf.Redlock, value: object
) -> None:
    key = f"prop-{uuid.uuid4().hex[:8]}"
    outcome_is_clean(lambda: redlock.try_acquire(key, value))  # type: ignore[arg-type]
    outcome_is_clean(lambda: redlock.acquire(key, 1, wait=value).release())  # type: ignore[arg-type]
    lock = redlock.acquire(key, 1)
    try:
        lock.extend(value)  # type: ignore[arg-type]
    except (rf.InvalidArgumentError, rf.ExpiredBeforeUseError):
        pass
    except rf.LockError as e:
        # A ttl the nodes refuse is InvalidArgument too; anything else is a bug.
        pytest.fail(f"unexpected {e!r}")
    lock.release()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=durations)
def test_any_async_duration_is_a_value_or_invalid_argument(
    urls: list[str], value: object
) -> None:
    async def run() -> None:
        async with await rf.AsyncRedlock.connect(urls) as redlock:
            key = f"prop-{uuid.uuid4().hex[:8]}"
            try:
                lock = await redlock.try_acquire(key, value)  # type: ignore[arg-type]
            except (rf.InvalidArgumentError, rf.ExpiredBeforeUseError):
                return
            if lock is not None:
                await lock.release()

    asyncio.run(run())


class LockMachine(RuleBasedStateMachine):
    """Two keys, two clients; operations in any order."""

    urls: list[str] = []

    def __init__(self) -> None:
        super().__init__()
        self.clients = [
            rf.Redlock.connect(self.urls, retry=rf.RetryPolicy.no_retry()) for _ in range(2)
        ]
        run = uuid.uuid4().hex[:8]
        self.keys = [f"sm-{run}-a", f"sm-{run}-b"]
        self.held: dict[str, rf.Lock] = {}
        self.last_token: dict[str, int] = {}

    def teardown(self) -> None:
        for lock in self.held.values():
            lock.release()
        for c in self.clients:
            c.close()

    def _got(self, key: str, lock: rf.Lock) -> None:
        assert key not in self.held, "two live owners of one key"
        assert lock.token > self.last_token.get(key, 0), "token went backwards"
        self.last_token[key] = lock.token
        self.held[key] = lock

    @rule(k=st.integers(0, 1), c=st.integers(0, 1))
    def acquire(self, k: int, c: int) -> None:
        key = self.keys[k]
        try:
            lock = self.clients[c].acquire(key, 5)
        except rf.LockBusyError:
            assert key in self.held
            return
        self._got(key, lock)

    @rule(k=st.integers(0, 1), c=st.integers(0, 1))
    def try_acquire(self, k: int, c: int) -> None:
        key = self.keys[k]
        lock = self.clients[c].try_acquire(key, 5)
        if lock is None:
            assert key in self.held
        else:
            self._got(key, lock)

    @rule(k=st.integers(0, 1))
    def extend(self, k: int) -> None:
        lock = self.held.get(self.keys[k])
        if lock is not None:
            lock.extend(5)
            assert lock.validity > 4

    @rule(k=st.integers(0, 1))
    def release(self, k: int) -> None:
        lock = self.held.pop(self.keys[k], None)
        if lock is not None:
            assert lock.release() is True

    @invariant()
    def one_live_owner_per_key(self) -> None:
        if not hasattr(self, "clients"):
            return
        for key in self.keys:
            views = self.clients[0].inspect(key)
            held = sum(1 for v in views if v.held)
            if key in self.held:
                assert held >= 3
                assert all(v.token == self.held[key].token for v in views if v.held)
            else:
                assert held == 0


def test_lock_state_machine(urls: list[str]) -> None:
    LockMachine.urls = urls
    machine = LockMachine.TestCase
    machine.settings = settings(max_examples=25, deadline=None, stateful_step_count=15)
    machine().runTest()
