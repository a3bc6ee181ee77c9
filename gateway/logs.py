"""The log: its setup (level, `--access-log`) and its two formats (`--log-format`): text for
people, JSON lines for log shippers."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
LEVEL_ENV = "PULSAR_GATEWAY_LOG_LEVEL"
ACCESS_LOGGER = "aiohttp.access"  # aiohttp's access log (`--access-log`)
ACCESS_LOG_HELP = "log one line per HTTP request (aiohttp's access log; off by default)"


def setup_logging(
    *,
    level: str | None = None,
    log_format: str = "text",
    worker: int | None = None,
    access_log: bool = False,
) -> None:
    """Log to stderr at `level` (None: PULSAR_GATEWAY_LOG_LEVEL, else INFO) in `log_format`
    (`text` or `json`); `worker`: the index of one of `run --workers N`'s processes, shown in
    each line. `access_log`: aiohttp's access log (one INFO line per HTTP request) is on,
    whatever the level. As logging.basicConfig, this does nothing once the root logger has a
    handler: the first call (the command line's) wins over a command's own."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter(worker))
    else:
        handler.setFormatter(text_formatter(f"worker {worker} " if worker is not None else ""))
    root.addHandler(handler)
    root.setLevel(resolve_level(level, os.environ))
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)
    # Explicitly on or off, so that serve_config() can tell which (access_log_enabled()).
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO if access_log else logging.WARNING)


def access_log_enabled() -> bool:
    """Whether setup_logging() turned aiohttp's access log on (`--access-log`)."""
    level = logging.getLogger(ACCESS_LOGGER).level
    return level != logging.NOTSET and level <= logging.INFO


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
