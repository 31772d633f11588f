"""`verispec export`: drafts and heads written in the layouts other engines load (llama.cpp GGUF; vLLM and
SGLang checkpoints)."""
