"""The behaviour users rely on: GIL, Ctrl-C, garbage collection, fork, bad
input, logging."""

from __future__ import annotations

import _thread
import gc
import logging
import math
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from datetime import timedelta

import pytest

import redlock_fenced as rf


def held_by_any(redlock: rf.Redlock, key: str) -> bool:
    return any(v.held for v in redlock.inspect(key))


def test_a_blocking_call_releases_the_gil(redlock: rf.Redlock, key: str) -> None:
    holder = redlock.acquire(key, 10)
    counter = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal counter
        while not stop.is_set():
            counter += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        before = counter
        with pytest.raises(rf.LockBusyError):
            redlock.acquire(key, 5, wait=0.5)
        during = counter - before
    finally:
        stop.set()
        thread.join()
    # Another Python thread ran the whole time the call waited.
    assert during > 10_000, during
    holder.release()


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """Python's own SIGINT handler for the test. `_thread.interrupt_main`
    does nothing while SIGINT is ignored, which a process started in the
    background of a shell without job control inherits (`cmd &` in a
    script); the interpreter then keeps that."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_interrupts_a_waiting_acquire_and_leaves_no_grant(
    redlock: rf.Redlock, key: str, ctrl_c: None
) -> None:
    holder = redlock.acquire(key, 10)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        redlock.acquire(key, 5, wait=10)
    assert time.monotonic() - started < 3
    timer.join()
    assert holder.release() is True
    # The interrupted waiter must not take the freed lock afterwards.
    time.sleep(0.5)
    assert not held_by_any(redlock, key)


def test_ctrl_c_during_a_plain_acquire_leaves_no_grant(
    redlock: rf.Redlock, key: str, ctrl_c: None
) -> None:
    for delay in (0.0, 0.001, 0.003, 0.01):
        got: list[rf.Lock] = []
        timer = threading.Timer(delay, _thread.interrupt_main)
        try:
            timer.start()
            got.append(redlock.acquire(key, 10))
            time.sleep(0.5)  # the interrupt lands here when the round was faster
        except KeyboardInterrupt:
            pass
        finally:
            timer.join()
        for lock in got:
            lock.release()
    deadline = time.monotonic() + 2
    while held_by_any(redlock, key):
        assert time.monotonic() < deadline, redlock.inspect(key)
        time.sleep(0.05)


def test_lost_wait_releases_the_gil_and_reacts_to_ctrl_c(
    redlock: rf.Redlock, key: str, ctrl_c: None
) -> None:
    lock = redlock.acquire(key, 10)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        lock.lost.wait()
    timer.join()
    assert lock.lost.wait(0.05) is False
    lock.release()


def test_a_garbage_collected_lock_is_released_with_a_warning(
    redlock: rf.Redlock, key: str
) -> None:
    lock = redlock.acquire(key, 30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lock
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught), caught
    deadline = time.monotonic() + 1.0
    while held_by_any(redlock, key):
        assert time.monotonic() < deadline, "the lock was not released within 1 s"
        time.sleep(0.02)


def test_a_released_lock_gives_no_warning(redlock: rf.Redlock, key: str) -> None:
    lock = redlock.acquire(key, 30)
    lock.release()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lock
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_client_made_before_fork_raises_in_the_child(redlock: rf.Redlock, key: str) -> None:
    redlock.acquire(key, 1).release()  # the runtime runs in this process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            redlock.acquire(key, 1)
        except rf.LockStateError as e:
            code = 0 if "fork" in str(e) else 4
        except BaseException:
            code = 5
        os.write(write, b"x")
        os._exit(code)
    os.close(write)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child hung instead of raising")
        time.sleep(0.02)
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent is unaffected.
    redlock.acquire(key, 1).release()


BAD_DURATIONS: list[object] = [
    0, -1, -0.5, 0.0, math.nan, math.inf, -math.inf, 1e300, 10**400, 86_401,
    timedelta(0), timedelta(days=-1), timedelta(days=2), 0.0009,
]
WRONG_TYPES: list[object] = ["5", None, b"1", [1], True, object()]


@pytest.mark.parametrize("value", BAD_DURATIONS)
def test_bad_durations_raise_invalid_argument(
    redlock: rf.Redlock, key: str, value: object
) -> None:
    with pytest.raises(rf.InvalidArgumentError) as caught:
        redlock.acquire(key, value)  # type: ignore[arg-type]
    assert isinstance(caught.value, ValueError)
    with pytest.raises(rf.InvalidArgumentError):
        redlock.try_acquire(key, value)  # type: ignore[arg-type]
    with pytest.raises(rf.InvalidArgumentError):
        redlock.hold(key, value)  # type: ignore[arg-type]
    if value != 0 and value != 0.0 and value != timedelta(0) and value != 0.0009:
        with pytest.raises(rf.InvalidArgumentError):
            redlock.acquire(key, 1, wait=value)  # type: ignore[arg-type]
    lock = redlock.acquire(key, 1)
    with pytest.raises(rf.InvalidArgumentError):
        lock.extend(value)  # type: ignore[arg-type]
    lock.release()


@pytest.mark.parametrize("value", WRONG_TYPES)
def test_wrong_types_raise_type_error(redlock: rf.Redlock, key: str, value: object) -> None:
    if value is not None:
        with pytest.raises(TypeError):
            redlock.acquire(key, value)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            redlock.acquire(key, 1, wait=value)  # type: ignore[arg-type]
    if not isinstance(value, str):
        with pytest.raises(TypeError):
            redlock.acquire(value, 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            redlock.release_owner(key, value)  # type: ignore[arg-type]


def test_bad_connect_options(urls: list[str]) -> None:
    with pytest.raises(rf.InvalidArgumentError):
        rf.Redlock.connect(urls, node_timeout=0)
    with pytest.raises(rf.InvalidArgumentError):
        rf.Redlock.connect(urls, drift_factor=1.5)
    with pytest.raises(rf.InvalidArgumentError):
        rf.Redlock.connect(urls, retry=rf.RetryPolicy(attempts=0))
    with pytest.raises(rf.InvalidArgumentError):
        rf.Redlock.connect([])
    with pytest.raises(rf.InvalidArgumentError):
        rf.Redlock.connect(["http://127.0.0.1:1"])
    with pytest.raises(TypeError):
        rf.Redlock.connect(urls[0])
    with pytest.raises(TypeError):
        rf.Redlock.connect([1])  # type: ignore[list-item]


def test_logs_go_to_python_logging_without_the_owner(
    redlock: rf.Redlock, urls: list[str], key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="redlock_client")
    rf.set_log_level("debug")
    try:
        lock = redlock.acquire(key, 5)
        owner = lock.owner
        lock.extend(5)
        lock.release()
        # A warning: an even number of nodes.
        rf.Redlock.connect(urls[:4]).close()
        time.sleep(0.2)
    finally:
        rf.set_log_level("warning")
    records = [r for r in caplog.records if r.name.startswith("redlock_client")]
    assert records, "no records from the Rust client"
    assert any(r.levelno == logging.WARNING and "even number" in r.getMessage() for r in records)
    assert any(r.levelno == logging.DEBUG and key in r.getMessage() for r in records)
    for r in records:
        assert owner not in r.getMessage()
    with pytest.raises(rf.InvalidArgumentError):
        rf.set_log_level("loud")
