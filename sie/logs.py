"""Logging setup shared by every process: text for people, JSON lines for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
import time

# Attributes every LogRecord has; anything else came in through `extra=` and is context.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "role": self.role,
            "pid": record.process,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self, role: str) -> None:
        super().__init__(f"%(asctime)s %(levelname)s [{role}] %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        if context:
            text += " " + " ".join(f"{k}={v}" for k, v in context.items())
        return text


def configure_logging(level: str, log_format: str, role: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(role) if log_format == "json" else TextFormatter(role))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
