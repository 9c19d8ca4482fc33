"""Launch: the run directory, sbatch rendering (pure), submitit's executor (with hetjob support),
and the head process: the coordinator's own job (cells layout) or component 0 (hetjob layout)."""
