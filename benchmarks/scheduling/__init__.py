"""Scheduling benchmark (simulated): elastic vs colocate vs async, ratios side by side.

    PYTHONPATH=. python -m benchmarks.scheduling            # the default, a few minutes on 2 cores
    PYTHONPATH=. python -m benchmarks.scheduling --seeds 5  # more seeds
"""
