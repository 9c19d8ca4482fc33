"""Token-level capture of every model call: the record format and the store that keeps it.
May import: errors, run, store."""
