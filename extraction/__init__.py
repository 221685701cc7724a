"""LLM extraction: client, structured output, prompt rendering, redaction, embeddings."""
