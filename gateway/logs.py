"""The log's two formats (`--log-format`): text for people, JSON lines for log shippers."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
LEVEL_ENV = "PULSAR_GATEWAY_LOG_LEVEL"
ACCESS_LOGGER = "aiohttp.access"  # aiohttp's access log (`--access-log`)


def text_formatter(prefix: str = "") -> logging.Formatter:
    """`2024-05-01 12:00:00,123 INFO worker 0 gateway.process: gateway started`."""
    return logging.Formatter(f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `ts` (ISO-8601, UTC, milliseconds, `Z`), `level`, `logger`,
    `message`, `exception` (the traceback, when there is one) and `worker` (under
    `run --workers N`). Newlines inside the message or traceback are escaped by JSON."""

    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self.worker = worker

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.worker is not None:
            entry["worker"] = self.worker
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def resolve_level(flag: str | None, env: Mapping[str, str], default: str = "INFO") -> str:
    """The level to log at: `--log-level`, else PULSAR_GATEWAY_LOG_LEVEL, else `default` (case
    ignored). ValueError names the source of a level that is not one of LEVELS."""
    if flag is not None:
        source, given = "--log-level", flag
    else:
        source, given = LEVEL_ENV, env.get(LEVEL_ENV) or default
    level = given.strip().upper()
    if level not in LEVELS:
        raise ValueError(f"{source}: unknown level '{given}' (one of {', '.join(LEVELS)})")
    return level
