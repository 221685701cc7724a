"""Seeded `uuid.uuid4` for side-by-side runs (`bench/eval_identical.py`): with
`PMEM_BENCH_UUID_SEED` set, every id a process draws comes from one seeded generator, so two
runs of one code tie-break ranked rows the same way and their reports can be compared byte for
byte. Python imports this module at start-up when its folder is on PYTHONPATH."""

import os
import random
import uuid

_seed = os.environ.get("PMEM_BENCH_UUID_SEED")
if _seed is not None:
    _ids = random.Random(int(_seed))

    def _seeded_uuid4() -> uuid.UUID:
        return uuid.UUID(int=_ids.getrandbits(128), version=4)

    uuid.uuid4 = _seeded_uuid4
