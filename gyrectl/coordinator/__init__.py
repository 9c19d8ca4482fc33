"""The coordinator: its state and events, the journal, the policy contract (``actions``), the
ports it sees the world through (``ports``: gateway, clock, step builder) and the main loop.
May import: errors, config, store, cluster (``base``)."""
