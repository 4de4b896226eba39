"""Which lines an edit may touch: the outline of definitions (ast, tree-sitter) and the plan from
--lines / --scope / the instruction with its scope ladder. Imports: text, settings, options."""
