"""`pmem`, the command line of persona-memory: its entry point, its commands and the embedded
demo services."""
