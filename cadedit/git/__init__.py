"""Git: the repository, the index and the pre-commit hook's work. Imports: text, settings."""
