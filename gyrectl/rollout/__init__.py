"""Rollout side: vLLM servers as steps, live weight sync, agent harness executions and their rewards."""
