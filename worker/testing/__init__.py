"""Stand-ins and launchers that tests and benchmarks share: a fake OpenAI-compatible server
(`fake_openai`), a llama.cpp `llama-server` launcher (`llama_server`) and mem0 set up offline
(`mem0_setup`, for the side-by-side benchmarks). Only the evaluations (`worker.evaluation`) import
them; the service never does."""
