"""Stand-ins and launchers that tests and benchmarks share: a fake OpenAI-compatible server
(`fake_openai`), a llama.cpp `llama-server` launcher (`llama_server`) and mem0 set up offline
(`mem0_setup`, for the side-by-side benchmarks), a Postgres streaming replica (`pg_replica`) and
the facts-that-change cases driven through the worker's pipeline against the fake server
(`facts_that_change`, its cases in `data/`). Tests and benchmarks import it from the repository;
nothing shipped does, and the wheel leaves it out."""
