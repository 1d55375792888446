"""``python -m llmexplore ...``: the same as the ``llmexplore`` command."""

import sys

from .cli import main

sys.exit(main())
