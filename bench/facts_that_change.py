"""Facts that change through the worker's pipeline (`testkit.facts_that_change`).

python bench/facts_that_change.py [--store sqlite|postgres] [--json-out FILE]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.facts_that_change import main

if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
