from __future__ import annotations

import os

from hypothesis import settings

# CI machines are small and shared: no deadlines, a bounded number of examples.
settings.register_profile("ci", deadline=None, max_examples=200)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
