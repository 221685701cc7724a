"""Test doubles that speak real protocols (a fake OpenAI-compatible HTTP server)."""
