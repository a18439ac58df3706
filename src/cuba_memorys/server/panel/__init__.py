"""serve's web panel at /panel (issue 20): server-rendered pages over the services.

Published only with CUBA_PANEL=1 (server/events_http.register calls ``routes.register``); the
walls (loopback, forwarding headers, the token login, CSRF, headers) are in ``security``; the
pages call the services in a worker thread through the same grant checks as MCP tool calls
(``services_of``), never over HTTP.
"""
