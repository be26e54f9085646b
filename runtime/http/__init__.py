"""The HTTP API: one module of routes per resource (``api.py``: the shared error type and
helpers; ``policy.py``: every route's explicit access policy)."""
