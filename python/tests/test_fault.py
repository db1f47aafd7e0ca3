"""The fault test in its short form (`make python-fault` runs the long one)."""

from __future__ import annotations

import os

import fault


def test_contention_under_faults_keeps_tokens_fenced() -> None:
    duration = float(os.environ.get("REDLOCK_PY_FAULT_SECONDS", "8"))
    report = fault.run(duration, seed=11)
    assert not report.violations, report.violations[:10]
    # The run did something: acquisitions, faults, writes through the fence.
    assert report.acquisitions >= 20, report
    assert report.accepted >= 20, report
    assert sum(report.faults.values()) >= 3, report


def test_the_checker_finds_each_kind_of_violation(tmp_path: object) -> None:
    db_path = os.path.join(str(tmp_path), "r.db")
    fault.init_db(db_path)
    db = fault.open_db(db_path)
    key = fault.KEYS[0]
    # Tokens 5 then 3 (a stale write slipping past a broken fence).
    db.execute("INSERT INTO accepted (key, token, worker) VALUES (?, 5, 'w1')", (key,))
    db.execute("INSERT INTO accepted (key, token, worker) VALUES (?, 3, 'w2')", (key,))
    db.close()
    acqs: list[fault.Acq] = [
        (key, 5, "w1", 0.0, 1.0, 2.0),
        (key, 3, "w2", 3.0, 4.0, 5.0),  # started after token 5 was handed out
        (key, 3, "w3", 3.5, 4.5, 5.5),  # a duplicate token
    ]
    report = fault.Report()
    fault.check(acqs, db_path, report)
    text = "\n".join(report.violations)
    assert "duplicate tokens [3]" in text
    assert "is not above 5" in text
    assert "stale write accepted" in text
