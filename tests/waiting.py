"""Wait for a condition, never for a fixed time: on a busy machine a fixed sleep is either
too short (a flaky test) or too long (a slow one)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout: float = 30, what: str = "", every: float = 0.02
) -> T:
    """``condition()``'s first true value, asked every ``every`` seconds; AssertionError
    naming ``what`` when ``timeout`` seconds pass without one."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what or condition}")
        time.sleep(every)
