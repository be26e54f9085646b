"""Where audio is loud: the stretches of 20 ms frames above a level (a call's or a recording's
turns, told apart from silence)."""

from __future__ import annotations

import numpy as np


def loud_spans(pcm: np.ndarray, rate: int, *, level: float = 500.0) -> list[tuple[int, int]]:
    """(start, end) milliseconds of the stretches whose 20 ms frames are louder than ``level``
    (RMS)."""
    frame = rate // 50
    blocks = pcm[: pcm.size // frame * frame].reshape(-1, frame).astype(np.float64)
    loud = np.sqrt((blocks**2).mean(axis=1)) > level
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for i, on in enumerate([*loud, False]):
        if on and start is None:
            start = i
        elif not on and start is not None:
            spans.append((start * 20, i * 20))
            start = None
    return spans
