"""Services: one module per tool family. Each function validates, calls the store, and
returns the response object the MCP tool and the CLI both show."""
