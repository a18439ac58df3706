"""The memory's lifecycle: decay and feedback, consolidation (zafra, the REM cycle), the
bitemporal fact log, undo files and forgetting (docs/memory-model.md)."""
