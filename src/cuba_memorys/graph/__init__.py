"""Graph algorithms over the entity relations (pure functions; the store supplies edges)."""
