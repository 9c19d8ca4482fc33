"""Actuation: the :class:`~gyrectl.cluster.base.Cluster` interface and one module per backend.

Core code (coordinator, scheduler) only sees ``base``; ``local``, ``slurm`` and ``simulated``
fill it in. Nothing outside this package imports a backend except the code that builds one.
"""
