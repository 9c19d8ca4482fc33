"""The run directory: its layout (``RunDir``) and its files read back with their shape checked; how
the head starts processes that must not outlive it (``children``).
May import: config, errors."""
