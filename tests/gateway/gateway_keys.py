"""The three secrets of the gateway tests, as a run directory holds them (``token``,
``admin_token``, ``server_key``): each a different string, each long enough for the gateway."""

TOKEN = "test-client-token-for-the-harnesses"
ADMIN_TOKEN = "test-admin-token-for-the-operator"
SERVER_KEY = "test-server-key-the-gateway-sends"
