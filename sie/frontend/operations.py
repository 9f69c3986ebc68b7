"""What a frontend needs to be operated: who may call it, where it counts, where it traces.

Built by `sie.frontend.serve` from the supervisor's hand-downs; tests build it directly (or leave
the default: no authentication, no statistics block, no tracing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sie.frontend.exposition import Sources
    from sie.frontend.rebalance import ConnectionRebalancer
    from sie.frontend.tracing import Tracer
    from sie.metrics.recorders import FrontendRecorder


@dataclass(frozen=True, slots=True)
class Operations:
    auth_tokens: list[str] = field(default_factory=list)
    protect_metrics: bool = False  # /metrics behind the tokens too (probes never are)
    recorder: FrontendRecorder | None = None  # this frontend's rows of the statistics block
    sources: Sources | None = None  # what /metrics reads: the whole server's blocks
    tracer: Tracer | None = None
    rebalancer: ConnectionRebalancer | None = None  # closes a connection now and then on a crowded frontend
