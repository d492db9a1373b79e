"""python -m vitviz opens the window."""

import sys

from vitviz.app import main

if __name__ == "__main__":  # not when a spawned training process re-imports this module
    sys.exit(main())
