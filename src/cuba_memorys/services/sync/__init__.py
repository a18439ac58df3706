"""Sync between machines through git (cuba_sync): the bundle format and its export."""
