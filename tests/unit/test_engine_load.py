from gyrectl.rollout.load import engine_load

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
vllm:num_requests_waiting_by_reason{reason="capacity"} 9.0
vllm:num_requests_swapped 7.0
"""


def test_engine_load_sums_the_running_and_waiting_gauges_only() -> None:
    assert engine_load(METRICS) == {"running": 4, "waiting": 2}
    assert engine_load("") == {"running": 0, "waiting": 0}
