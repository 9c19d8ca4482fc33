"""Launch, the wiring: submitting a run, the head process (the coordinator's own job in the cells
layout, component 0 in the hetjob layout) that builds the real loop, and the concrete step builder
(``steps``). The status views are :mod:`gyrectl.status`.
May import: any package but sim and cli."""
