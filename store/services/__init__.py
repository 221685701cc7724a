"""Services built on a store: recall in a context, the settings cache, the OpenAI function tools."""
