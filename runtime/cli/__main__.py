"""``python -m runtime.cli``."""

import sys

from runtime.cli.command import main

sys.exit(main())
