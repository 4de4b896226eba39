"""Processes that serve edits: the warm server's protocol, client and daemon (warm.py) and a
shared OpenAI-compatible engine's client (engine.py; its wire and answers beside it).
Imports: tries and below."""
