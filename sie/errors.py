"""The error tree of the HTTP contract: every error a client can see, with its code and status.

Routes and the device client raise these; `sie.frontend.errors` is the one place that turns them
into responses. This module imports nothing from `sie` so every package may use it.
"""

from __future__ import annotations


class SieError(Exception):
    """Base of every error with a place in the spec's error table."""

    status: int = 500
    code: str = "INTERNAL_ERROR"
    retry_after_s: int | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(SieError):
    status, code = 400, "INVALID_INPUT"


class InputTooLong(SieError):
    status, code = 413, "INPUT_TOO_LONG"


class ModelNotFound(SieError):
    status, code = 404, "MODEL_NOT_FOUND"

    def __init__(self, model: str) -> None:
        super().__init__(f"Model '{model}' not found")
        self.model = model


class ModelLoading(SieError):
    status, code, retry_after_s = 503, "MODEL_LOADING", 5


class ModelLoadFailed(SieError):
    status, code = 502, "MODEL_LOAD_FAILED"


class LoraLoading(SieError):
    status, code, retry_after_s = 503, "LORA_LOADING", 1


class QueueFull(SieError):
    status, code, retry_after_s = 503, "QUEUE_FULL", 1


class ResourceExhausted(SieError):
    status, code, retry_after_s = 503, "RESOURCE_EXHAUSTED", 5


class DeviceUnavailable(SieError):
    status, code, retry_after_s = 503, "DEVICE_UNAVAILABLE", 1


class ShuttingDown(SieError):
    status, code, retry_after_s = 503, "SHUTTING_DOWN", 5


class InferenceError(SieError):
    status, code = 500, "INFERENCE_ERROR"
