"""``gyrectl simulate``: the real coordinator and policies on a simulated cluster and gateway
sharing one virtual clock; workloads, cost models, metrics.
May import: any package but cli."""
