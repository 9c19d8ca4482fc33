"""A resident trainer's offload and onload on a GPU (``gyrectl.train.offload``), measured on a
random-init Qwen2-shaped model (no download: the shape of Qwen2.5-0.5B by default), sharded with
FSDP2 in a group of one as the trainer shards it, after one AdamW step so the optimizer state
exists. Prints one JSON line per round and a summary line.

    python -m benchmarks.gpu.offload --rounds 3            # on a machine with a CUDA GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def main() -> None:
    from transformers import AutoModelForCausalLM, Qwen2Config

    from gyrectl.train.distributed import close_world, init_world, shard_model
    from gyrectl.train.offload import offload, onload

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--layers", type=int, default=24)
    args = parser.parse_args()
    world = init_world()
    assert world.device.type == "cuda", "this measures the GPU path; on CPU offload does nothing"
    config = Qwen2Config(vocab_size=151936, hidden_size=args.hidden, intermediate_size=args.hidden * 27 // 5,
                         num_hidden_layers=args.layers, num_attention_heads=14, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").to(world.device)
    params = sum(p.numel() for p in model.parameters())
    model = shard_model(model, world=world, compute_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    ids = torch.randint(0, config.vocab_size, (1, 512), device=world.device)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    on_gpu = torch.cuda.memory_allocated() / 2**30
    rows = []
    try:
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            offload(model, optimizer, device=world.device)
            t1 = time.perf_counter()
            offloaded = torch.cuda.memory_allocated() / 2**30
            onload(model, optimizer, device=world.device)
            t2 = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()  # the state trains on after the round trip
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            rows.append({"offload_s": t1 - t0, "onload_s": t2 - t1, "gib_on_gpu": on_gpu, "gib_offloaded": offloaded})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        close_world()
    print(json.dumps({"params": params, "gpu": torch.cuda.get_device_name(),
                      "offload_s_median": statistics.median(r["offload_s"] for r in rows),
                      "onload_s_median": statistics.median(r["onload_s"] for r in rows),
                      "gib_on_gpu": on_gpu, "gib_offloaded": rows[-1]["gib_offloaded"]}))


if __name__ == "__main__":
    main()
