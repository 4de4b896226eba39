"""The language model behind one interface (model.py: load_model, CachedLM). torch/ holds the
Qwen2 forward, its one-token steps and the tokenizer; llama/ the llama.cpp backend and GGUF
files; hardware.py measures which backend, device and dtype are faster; prefix_store.py
keeps prompt prefixes on disk. torch is imported only inside torch/ and behind model.py's
loader. Imports: text, settings, errors."""
