"""Evaluation of recall quality: data sets (LoCoMo), their held-out splits and the scoring.

Pure code plus file loading; the runs through the real stores live in `worker.commands.evaluate`."""
