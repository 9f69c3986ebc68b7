"""ConnectionRebalancer on its own: a live numpy view of every frontend's in-flight gauge, a clock."""

from __future__ import annotations

import numpy as np

from sie.frontend.rebalance import ConnectionRebalancer


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def rebalancer(loads: list[int], frontend: int, clock: Clock) -> tuple[ConnectionRebalancer, np.ndarray]:
    gauge = np.array(loads, np.uint64)
    return ConnectionRebalancer(gauge, frontend, min_interval_s=0.05, clock=clock), gauge


def test_a_crowded_frontend_closes_while_another_is_idle() -> None:
    clock = Clock()
    crowded, _ = rebalancer([9, 8, 7, 5, 3, 0, 0, 0], 0, clock)
    assert crowded.should_close()


def test_even_frontends_close_nothing() -> None:
    clock = Clock()
    for frontend in range(8):
        even, _ = rebalancer([4, 5, 4, 3, 4, 4, 5, 3], frontend, clock)
        assert not even.should_close()


def test_only_the_crowded_side_closes() -> None:
    clock = Clock()
    idle, _ = rebalancer([9, 8, 7, 5, 3, 0, 0, 0], 6, clock)
    middling, _ = rebalancer([9, 8, 7, 5, 3, 0, 0, 0], 3, clock)
    assert not idle.should_close()
    assert not middling.should_close()


def test_no_close_when_nobody_has_room() -> None:
    # One frontend is over its share, but every other is near it: a move would gain nothing.
    clock = Clock()
    crowded, _ = rebalancer([8, 4, 4, 4, 4, 4, 4, 4], 0, clock)
    assert not crowded.should_close()


def run_for(rebalancer: ConnectionRebalancer, clock: Clock, seconds: float) -> int:
    """Responses every 10 ms for `seconds`; how many closed their connection."""
    closes = 0
    for _ in range(round(seconds / 0.01)):
        clock.now_s += 0.01
        closes += rebalancer.should_close()
    return closes


def test_closes_are_spaced_and_follow_the_live_gauge() -> None:
    clock = Clock()
    crowded, gauge = rebalancer([8, 0], 0, clock)
    assert crowded.should_close()
    assert not crowded.should_close()  # within the interval
    clock.now_s += 0.06
    assert crowded.should_close()
    gauge[:] = [4, 4]  # the clients moved
    run_for(crowded, clock, 1.0)
    assert run_for(crowded, clock, 1.0) == 0


def test_an_instant_dip_is_not_a_skew() -> None:
    # Requests finish a batch at a time: a frontend's gauge drops to nothing for a moment.
    clock = Clock()
    even, gauge = rebalancer([4, 4], 0, clock)
    assert run_for(even, clock, 1.0) == 0
    gauge[:] = [8, 0]
    assert run_for(even, clock, 0.02) == 0
    gauge[:] = [4, 4]
    assert run_for(even, clock, 1.0) == 0
    gauge[:] = [8, 0]  # and when it lasts, it is
    assert run_for(even, clock, 1.0) >= 10


def test_light_load_on_two_frontends() -> None:
    clock = Clock()
    two, _ = rebalancer([4, 0], 0, clock)
    assert two.should_close()
    one_each, _ = rebalancer([1, 1], 0, clock)
    lone, _ = rebalancer([1, 0], 0, clock)  # a single client: nothing to spread
    assert not one_each.should_close()
    assert not lone.should_close()
