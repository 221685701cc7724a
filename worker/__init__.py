"""Event side: FastStream NATS app, event models, pipeline, metrics, health and the `pmem` CLI."""
