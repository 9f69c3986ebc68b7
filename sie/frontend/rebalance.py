"""Spread keep-alive connections over the frontends when a burst of them landed on a few.

All frontends accept from one shared listening socket. When many clients connect at once (a
load balancer's pool warming up, a benchmark's clients), the first frontend the kernel wakes
accepts a run of them before the others are scheduled, and keep-alive holds them there: on a
many-core box some frontends sit idle while others saturate. A frontend that carries well over
its share of the in-flight requests (averaged over a moment), while another carries well under,
answers one response now and then with `connection: close`. The client reconnects, and the
frontend that accepts first is one waiting in its event loop, not one busy parsing: the load
drifts to the idle frontends. When the frontends are even, nothing closes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

CLOSE_HEADER = (b"connection", b"close")
# At most one rebalancing close per frontend per interval: a reconnect costs a handshake, and the
# in-flight counts need a moment to show where the moved client landed.
MIN_INTERVAL_S = 0.05
# The gauges are averaged over about this long before they are compared: requests finish a batch
# at a time, so one frontend's count dips to nothing for an instant without any skew.
SMOOTHING_S = 0.2
SAMPLE_EVERY_S = 0.005


class ConnectionRebalancer:
    """Decides, per response, whether this frontend should close the connection it goes out on."""

    def __init__(
        self,
        in_flight: np.ndarray,
        frontend: int,
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        smoothing_s: float = SMOOTHING_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._in_flight = in_flight  # every frontend's gauge, a live view of the statistics block
        self._frontend = frontend
        self._min_interval_s = min_interval_s
        self._smoothing_s = smoothing_s
        self._clock = clock
        self._next_s = 0.0
        self._average = np.zeros(len(in_flight), np.float64)
        self._sampled_s: float | None = None
        self._skewed = False  # decided from the average, once per sample rather than per response

    def should_close(self) -> bool:
        """Called as a response starts, while its own request still counts as in flight."""
        now = self._clock()
        self._sample(now)
        if now < self._next_s or not self._skewed:
            return False
        self._next_s = now + self._min_interval_s
        return True

    def _sample(self, now: float) -> None:
        if self._sampled_s is None:
            weight = 1.0
        elif now - self._sampled_s >= SAMPLE_EVERY_S:
            weight = -math.expm1(-(now - self._sampled_s) / self._smoothing_s)
        else:
            return
        average = self._average
        average += weight * (self._in_flight - average)
        self._sampled_s = now
        fair = float(average.mean())
        # A quarter over the fair share while some frontend is a quarter under it, each past a
        # margin of one request: a clear skew, not the jitter of requests between round trips.
        self._skewed = average[self._frontend] > 1.25 * fair + 1 and float(average.min()) < 0.75 * fair - 1
