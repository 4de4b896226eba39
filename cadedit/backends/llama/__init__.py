"""The llama.cpp backend (llama-cpp-python's C API behind the same LM interface) and GGUF files'
metadata and tokenizer. llama_cpp itself is imported only when a model loads."""
