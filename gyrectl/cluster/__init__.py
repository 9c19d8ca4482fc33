"""Actuation: the :class:`~gyrectl.cluster.base.Cluster` interface and one module per backend.

Core code (coordinator, scheduler) only sees ``base``; ``local`` and ``slurm`` fill it in (the
``slurm_*`` modules: sbatch rendering, submitit's executor, srun steps, cell jobs), and
:mod:`gyrectl.sim.cluster` is the simulated one. Nothing outside this package imports a backend
except the code that builds one.
May import: errors, config, run.
"""
