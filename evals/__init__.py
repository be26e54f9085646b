"""``openrealtime eval``: scenario files, runner, checks, reports (SPEC EVAL-1)."""
