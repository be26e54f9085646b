"""The event loop: uvloop when it is installed (it comes with ``uvicorn[standard]``), as uvicorn
itself would choose; the standard asyncio loop otherwise."""

from __future__ import annotations


def install_uvloop() -> bool:
    """Make new event loops uvloop loops; False when uvloop is not available."""
    try:
        import uvloop
    except ImportError:
        return False
    uvloop.install()
    return True
