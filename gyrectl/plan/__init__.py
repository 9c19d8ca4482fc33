"""Before submitting: does a config's model fit its GPUs and nodes? (``gyrectl plan``).

May import: errors, config.
"""
