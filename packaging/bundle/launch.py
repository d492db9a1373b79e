"""Entry point of the PyInstaller bundle: the same main() as the `vitviz` gui-script."""

import sys

from vitviz.app import main

if __name__ == "__main__":  # a spawned training child re-imports this module: no second window
    sys.exit(main())
