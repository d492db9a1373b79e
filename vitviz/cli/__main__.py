"""``python -m vitviz.cli``: the same ``main`` as the ``vitviz-cli`` entry point."""

from __future__ import annotations

import sys

from vitviz.cli import main

if __name__ == "__main__":  # importing this module (a walk of the package) runs nothing
    sys.exit(main())
