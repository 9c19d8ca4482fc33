"""``gyrectl simulate``: the real coordinator and policies on a simulated cluster, rollout side and
trainers sharing one virtual clock (``world.py`` draws the parts and the ports they fill); the
simulator's own steps, workloads, cost models, metrics, and what a head that resumes a run takes
over (``resume.py``), and a finished run's executions replayed as a workload (``recorded.py`` reads
its run directory). It builds nothing of a real run (no command lines, no run directory), so it
needs no ``launch``.
May import: errors, config, run, store, capture (``source``), cluster (``base``), coordinator, scheduler."""
