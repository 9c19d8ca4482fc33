"""The Slurm backend: everything that knows Slurm.

``backend`` (the login-node side: submit, job state, cancel, the ``cells`` and ``hetjob`` layouts as
data), ``hetjob`` and ``cells`` (the ``Cluster`` of each layout, inside the allocation), ``sbatch``
(the scripts, as pure functions of the config), ``executor`` (submitit's, extended), ``templates``
(the text under ``slurm_templates/``), ``cli`` (``scontrol``/``sacct``/``sinfo`` as plain data),
``bind`` (a server bound to its node's address), ``fit`` (can the partition ever grant the
allocation) and ``deadline`` (the head stops before the time limit).
May import: errors, config, run, store, cluster (its interfaces).
"""
