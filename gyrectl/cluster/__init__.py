"""Actuation: what a backend does, from the login node and inside the allocation, one folder
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

One folder per backend: :mod:`gyrectl.cluster.local` and :mod:`gyrectl.cluster.slurm` (whose
``cells`` and ``hetjob`` layouts are data of the one Slurm backend); ``processes`` is the process
bookkeeping both share, and :mod:`gyrectl.sim.cluster` is the simulated ``Cluster``.
May import: errors, config, run, store.
"""
