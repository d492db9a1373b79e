"""python -m vitviz opens the window."""

import sys

from vitviz.app import main

sys.exit(main())
