"""Rollout side: vLLM servers as steps, live weight sync, agent harness executions and their rewards.
May import: errors, config, run, store, cluster (``base``, ``backend``), gateway, coordinator (events, groups, journal).
"""
