"""Durable on-disk records shared by the coordinator, the capture store and the CLI.
May import: errors."""
