"""Storage shared by the domain packages (``storage/postgres.py``)."""
