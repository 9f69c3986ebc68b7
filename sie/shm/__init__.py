"""Shared-memory transport between frontends and device processes: rings, wakeups, names, layouts.

Imports only numpy, posix_ipc and the standard library, so frontends and the supervisor can use
it without torch, and device processes without starlette or hypercorn.
"""

from __future__ import annotations

from sie.shm.doorbell import Doorbell, EventFd
from sie.shm.layout import (
    HAS_TOKEN_TYPES,
    LAYOUT_VERSION,
    REQUEST_HEADER,
    RESULT_HEADER,
    LayoutError,
    Op,
    OutputMask,
    ResultBlock,
    ResultKind,
    Status,
    TokenBatch,
    ValueDType,
    decode_request,
    decode_result,
    encode_request,
    encode_result,
    error_result,
    request_nbytes,
    result_nbytes,
)
from sie.shm.names import SHM_DIR, Namespace, pid_alive, remove_namespace, sweep_stale
from sie.shm.ring import Message, PayloadTooLarge, Ring, RingCorrupt, RingMissing, unlink_ring

__all__ = [
    "HAS_TOKEN_TYPES",
    "LAYOUT_VERSION",
    "REQUEST_HEADER",
    "RESULT_HEADER",
    "SHM_DIR",
    "Doorbell",
    "EventFd",
    "LayoutError",
    "Message",
    "Namespace",
    "Op",
    "OutputMask",
    "PayloadTooLarge",
    "ResultBlock",
    "ResultKind",
    "Ring",
    "RingCorrupt",
    "RingMissing",
    "Status",
    "TokenBatch",
    "ValueDType",
    "decode_request",
    "decode_result",
    "encode_request",
    "encode_result",
    "error_result",
    "pid_alive",
    "remove_namespace",
    "request_nbytes",
    "result_nbytes",
    "sweep_stale",
    "unlink_ring",
]
