"""Actuation: what a backend does, from the login node and inside the allocation, and one module
per backend.

Two interfaces. :class:`~gyrectl.cluster.base.Cluster` is what the head acts through inside the
allocation (discover nodes, start, stop and watch steps); core code (coordinator, scheduler) only
sees it. :class:`~gyrectl.cluster.backend.Backend` is everything else a backend does: from the
login node (render the ``--dry-run`` script, submit the head, read the job's state, cancel a
waiting job, check ``job.json``), the ``Cluster`` the head gets, and its node facts (where a
server listens and on which port, where a training step meets). ``backend_for(config)`` and
``backend_named(name)`` (for ``job.json``) are the one place that picks a backend by name, so
nothing outside this package compares ``backend`` or ``layout`` with a string
(``tests/unit/test_backend_names.py``).

``local`` / ``local_backend`` are the local backend; ``slurm_*`` the Slurm one (``slurm_backend``:
the login-node side, with the ``cells`` and ``hetjob`` layouts as data; ``slurm`` and
``slurm_cells``: the ``Cluster`` of each layout; sbatch rendering, submitit's executor, the
``scontrol``/``sacct`` calls, the node-bound server wrapper ``slurm_bind``), and
:mod:`gyrectl.sim.cluster` is the simulated ``Cluster``.
May import: errors, config, run, store.
"""
