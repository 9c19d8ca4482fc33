"""The thin Typer shell: one module per command group, one renderer (``render``).
May import: any package below it (it is the top)."""
