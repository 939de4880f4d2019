"""Retry with exponential backoff and jitter for transient Open failures.

A provider backend that is briefly unusable (the Docker daemon restarting,
say) fails Open with WORKSPACE_FAILED and metadata transient="true"; a
connection that is not up yet fails with UNAVAILABLE. Both may succeed a
moment later, so Open retries them. Anything else (a missing capability, a
bad argument) would fail identically again and is raised at once.
"""

from __future__ import annotations

import dataclasses
import random as _random
import time
from typing import Callable, TypeVar

import grpc

from .errors import WorkspacedError

_T = TypeVar("_T")


def is_transient(err: BaseException) -> bool:
    """Whether `err` is worth retrying: the server's transient flag, or UNAVAILABLE."""
    if not isinstance(err, WorkspacedError):
        return False
    return err.transient or err.code == grpc.StatusCode.UNAVAILABLE


@dataclasses.dataclass
class RetryPolicy:
    """How often and how patiently to retry a transient failure.

    The n-th retry (n = 1, 2, ...) waits
    min(max_backoff, initial_backoff * multiplier**(n-1)), scaled by a random
    factor in [1 - jitter, 1 + jitter] and capped again at max_backoff, so
    many clients failing together do not retry in lockstep.
    max_attempts=1 disables retrying.

    `sleep` and `random` are injectable so the schedule can be tested
    deterministically; they default to time.sleep and random.random.
    """

    max_attempts: int = 4
    initial_backoff: float = 0.2
    max_backoff: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2
    sleep: Callable[[float], None] = dataclasses.field(default=time.sleep, repr=False, compare=False)
    random: Callable[[], float] = dataclasses.field(default=_random.random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ValueError("backoffs must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be within [0, 1]")

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        factor = 1.0 - self.jitter + 2.0 * self.jitter * self.random()
        return min(self.max_backoff, base * factor)

    def call(self, fn: Callable[[], _T], retryable: Callable[[BaseException], bool] = is_transient) -> _T:
        """Calls fn() until it succeeds, fails non-retryably, or attempts run out.

        The last error is raised unchanged.
        """
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as err:  # noqa: BLE001 - filtered by retryable
                if attempt >= self.max_attempts or not retryable(err):
                    raise
                self.sleep(self.backoff(attempt))
                attempt += 1


NO_RETRY = RetryPolicy(max_attempts=1)
