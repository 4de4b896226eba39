"""What to ask and how to read the answer, pure: one edit's request before any tokenizer, the
messages of every prompt layout, the fenced answer and its cursor, scoped regions.
Imports: text, settings, options; no model."""
