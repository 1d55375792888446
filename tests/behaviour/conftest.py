"""tests/behaviour: the restructuring's behaviour check (issue 18 §6) and its goldens; capture.py is importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
