"""The control plane's HTTP routes, one module per audience."""
