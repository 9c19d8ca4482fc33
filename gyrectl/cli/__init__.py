"""The thin Typer shell: one module per command group, one renderer (``render``)."""
