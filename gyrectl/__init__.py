"""gyrectl: elastic RL training of long-horizon LLM agents on Slurm.

Data flow (one package per stage)::

    config -> launch -> coordinator -> (rollout servers | trainer) -> dedup -> train step -> weight sync
"""

__version__ = "0.1.0"
