"""Pure decisions of the store, no I/O: upsert policy, keys, query cues, hint, pagination, urls."""
