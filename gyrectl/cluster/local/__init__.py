"""The local backend: the head is a process on this machine and every virtual node is this
machine (``backend``: from the login node; ``cluster``: the ``Cluster`` the head acts through).
May import: errors, config, run, store, cluster (its interfaces).
"""
