"""Default extraction prompt and per-persona examples (data shipped in the wheel)."""
