"""The run directory: its layout (``RunDir``) and its files read back with their shape checked.
May import: config, errors."""
