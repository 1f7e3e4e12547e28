"""`python -m anagrapheus`: the `anagrapheus` command."""

import sys

from anagrapheus.cli import main

sys.exit(main())
