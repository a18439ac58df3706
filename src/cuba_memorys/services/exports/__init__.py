"""Offline exports of the memory: the dashboard file, the Obsidian vault, the official MCP memory
server's JSONL, and recipes as agent skills. Each reads through the store and writes files only."""
