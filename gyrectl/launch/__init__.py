"""Launch: the run directory, sbatch rendering (pure), submitit's heterogeneous executor, and the
head process that runs on the allocation's first component."""
