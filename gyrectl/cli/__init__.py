"""The thin Typer shell: one module per command group, one renderer (``render``).
May import: any package (it is the top)."""
