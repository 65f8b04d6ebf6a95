"""The HTTP faces: routes, request bodies, SSE, access, OpenAPI, the dashboard and MCP."""
