"""A reviewer's script: wait for the user's pending memories and approve them.

    PMEM_URL=… PMEM_REVIEWER_TOKEN=… PMEM_USER_ID=… python examples/review_pending.py

PMEM_REVIEWER_TOKEN: an admin's or team admin's JWT; PMEM_REVIEW_WAIT_S: how long to wait for one
(default 30). Prints one JSON line per approved memory.
"""

from __future__ import annotations

import json
import os
import time

from pmem_client import MemoryClient


def main() -> None:
    """Poll the review queue (with a deadline), approve what is pending for the user."""
    deadline = time.monotonic() + float(os.environ.get("PMEM_REVIEW_WAIT_S", "30"))
    with MemoryClient(
        os.environ.get("PMEM_URL", "http://127.0.0.1:8080"), os.environ["PMEM_REVIEWER_TOKEN"]
    ) as reviewer:
        items = reviewer.review_queue(user_id=os.environ["PMEM_USER_ID"])["items"]
        while not items:
            if time.monotonic() > deadline:
                raise SystemExit("nothing pending for this user yet")
            time.sleep(0.5)
            items = reviewer.review_queue(user_id=os.environ["PMEM_USER_ID"])["items"]
        for item in items:
            memory = reviewer.approve(item["id"])
            print(json.dumps({"key": memory["key"], "value": memory["value"], "status": memory["status"]}))


if __name__ == "__main__":
    main()
