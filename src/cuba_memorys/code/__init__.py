"""Source code as the memory sees it: the git repository (repo), normalised text spans (spans),
tree-sitter grammars (languages) and the symbols a file defines (symbols).

A layer beside search/graph/embed/judge: pure functions over files and git, no storage.
"""
