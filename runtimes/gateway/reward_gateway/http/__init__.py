"""What a client meets: the server, the ASGI front, the routes, the wire formats' rows, authentication and
log hygiene."""
