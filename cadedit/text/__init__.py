"""Text, pure: documents as bytes and lines, edit programs, the resolver, the oracle and its line
alignment, unified diffs and the guarded write of a user's file, languages by suffix.
Imports: errors and each other; no model, no torch."""
