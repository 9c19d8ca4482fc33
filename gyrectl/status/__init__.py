"""What ``gyrectl status`` shows of a run, as typed records read from the run directory, the
coordinator's journal and the backend's job state: ``view`` (``RunView``: the job, the node
table, cells, moves, steps, evaluations, faults, damage), ``rows`` (the rows read straight from
the run directory's files) and ``faults`` (the run's faults and recoveries, from the journal).
Their ``to_json`` is the ``status --json`` contract; the CLI renders them and ``launch`` asks for
the job's state before it submits.
May import: errors, config, run, store, cluster (``backend``), coordinator."""
