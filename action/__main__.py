"""`python -m action`: report the gate on the pull request."""

from __future__ import annotations

import sys

from action.main import main

sys.exit(main())
