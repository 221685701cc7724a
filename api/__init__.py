"""The control plane: `pmem serve`, an authenticated HTTP API (and the web UI) over the store."""
