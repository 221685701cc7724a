"""`pmem serve`: the control-plane HTTP API and the web UI."""
