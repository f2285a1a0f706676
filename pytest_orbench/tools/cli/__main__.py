"""`python -m pytest_orbench.tools.cli`: the `orbench` command."""

import sys

from pytest_orbench.tools.cli import main

sys.exit(main())
