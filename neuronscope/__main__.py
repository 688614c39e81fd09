"""``python -m neuronscope``: the command line."""

import sys

from neuronscope.cli import main

sys.exit(main())
