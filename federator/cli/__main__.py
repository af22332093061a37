"""`python -m federator.cli`: the `federator` command (tests and e2e start the hub this way)."""

import sys

from federator.cli import main

sys.exit(main())
