"""What the worker tests share: the line a started gateway logs, and a lookup through it."""

from __future__ import annotations

import json
import re
import urllib.request

TOPIC = "persistent/public/default/orders-partition-1"


STARTED = re.compile(r"started (\d+) workers: ([\d ]+)")


def lookup(port: int) -> dict[str, str]:
    url = f"http://127.0.0.1:{port}/lookup/v2/topic/{TOPIC}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return dict(json.loads(response.read()))
