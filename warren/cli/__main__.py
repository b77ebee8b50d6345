"""`python -m warren.cli`: the same as the `warrenctl` script."""

import sys

from warren.cli.main import main

sys.exit(main())
