"""`engines.read_ahead`: a partition's input files fetched ahead of the caller, in order, with a bound on how many
are held, an input's error raised where the caller reaches it, and no task left running when the caller stops."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_delta_provider.delta.engines import read_ahead


def test_results_come_in_order_and_at_most_ahead_are_held_beyond_the_callers():
    started: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> int:
        with lock:
            started.append(i)
        time.sleep(0.001 * (7 - i % 7))  # later items often finish first
        return i * i

    got = []
    for n, value in enumerate(read_ahead(task, list(range(40)), 2, 4, "t")):
        with lock:
            # the caller is at item n: items up to n + 4 may have been submitted, none beyond
            assert max(started) <= n + 4
        got.append(value)
    assert got == [i * i for i in range(40)]


def test_one_worker_runs_in_the_callers_thread():
    threads = set()

    def task(i: int) -> int:
        threads.add(threading.get_ident())
        return i

    assert list(read_ahead(task, [1, 2, 3], 1, 4, "t")) == [1, 2, 3]
    assert threads == {threading.get_ident()}


def test_an_error_is_raised_where_the_caller_reaches_it():
    def task(i: int) -> int:
        if i == 5:
            raise ValueError(f"input {i} is broken")
        return i

    got = []
    with pytest.raises(ValueError, match="input 5 is broken"):
        for value in read_ahead(task, list(range(10)), 2, 3, "t"):
            got.append(value)
    assert got == [0, 1, 2, 3, 4]


def test_stopping_early_leaves_no_task_running():
    running = threading.Event()
    done: list[int] = []

    def task(i: int) -> int:
        running.set()
        time.sleep(0.02)
        done.append(i)
        return i

    values = read_ahead(task, list(range(100)), 2, 4, "t")
    assert next(values) == 0
    values.close()  # the caller stops: queued tasks are cancelled, running ones waited for
    finished = len(done)
    time.sleep(0.1)
    assert len(done) == finished <= 1 + 4 + 2
    assert not [t for t in threading.enumerate() if t.name.startswith("t_")]
