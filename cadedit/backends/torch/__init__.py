"""The torch backend: cadedit's own Qwen2 forward and KV cache, the int8/int4 one-token steps and the
tokenizer. Imports torch at module level; only backends/model.py and hardware.py reach it, lazily."""
