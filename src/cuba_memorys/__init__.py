"""cuba-memorys: long-term memory for AI coding agents, served over MCP."""

__version__ = "0.1.0"
