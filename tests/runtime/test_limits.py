"""The write-request limiter (``runtime/limits.py`` rules 1–3), in virtual time."""

from __future__ import annotations

from runtime.limits import WriteRateLimiter


def test_a_full_bucket_allows_per_minute_then_says_how_long_to_wait() -> None:
    limiter = WriteRateLimiter(per_minute=60)
    assert [limiter.take("u", 0.0) for _ in range(60)] == [None] * 60
    assert limiter.take("u", 0.0) == 1
    assert limiter.take("u", 1.0) is None  # one second refills one request
    assert limiter.take("other", 0.0) is None  # buckets are per key


def test_the_wait_rounds_up_to_whole_seconds() -> None:
    limiter = WriteRateLimiter(per_minute=2)
    assert limiter.take("u", 0.0) is None and limiter.take("u", 0.0) is None
    assert limiter.take("u", 0.0) == 30
    assert limiter.take("u", 29.0) == 1
    assert limiter.take("u", 30.5) is None


def test_at_most_max_keys_buckets_are_kept() -> None:
    limiter = WriteRateLimiter(per_minute=1, max_keys=2)
    for key in ("a", "b", "c"):
        assert limiter.take(key, 0.0) is None
    assert limiter.take("a", 0.0) is None  # "a" was forgotten: a full bucket again
    assert limiter.take("c", 0.0) == 60
