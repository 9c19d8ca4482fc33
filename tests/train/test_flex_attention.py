"""The trainer's GPU attention path against its CPU one, on real packed micro-batches of a step.

On a GPU the trainer builds the model with FlexAttention (``policy_load.attention_for``) and
``mask.tree_mask_for`` hands it ``flex_tree_mask``'s block-sparse ``BlockMask``; on CPU it runs
sdpa with ``dense_tree_mask``. Both must train the same thing.

* Everywhere: the ``BlockMask`` of each micro-batch, at the trainer's block size (128), read back
  token by token -- ``mask_mod`` inside partial blocks, every pair of a *full* block visible
  (the kernel skips ``mask_mod`` there), everything else hidden -- equals ``dense_tree_mask``.
  ``tests/unit/test_packing.py`` compares the block grid with ``create_block_mask``'s (one
  micro-batch, block 16), but ``BlockMask.to_dense()`` merges partial and full blocks, so it
  cannot see a block wrongly marked full (checked: marking full every block whose keys' subtrees
  outlast the query block's *first* row passes it and fails this test).
* With CUDA: the GRPO loss (``step.micro_batch_loss``, summed over the step's micro-batches) and
  its gradient, model loaded once with sdpa and once with flex_attention. In float32 they agree
  to 1e-4 (relative; both kernels accumulate in float32, so only summation order differs). In
  bfloat16, the dtype the trainer computes in, flex is at most 1.5x as far from the float32
  figure as sdpa in bfloat16 is (bfloat16 alone moves the gradient far more than 1e-4, so a
  fixed tolerance would either flake or say nothing).

    .venv/bin/python -m pytest tests/train/test_flex_attention.py -q -rs
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gyrectl.config import load_config
from gyrectl.run.batch_file import read_batch_file
from gyrectl.train.batch import StepBatch, build_step_batch
from gyrectl.train.mask import dense_tree_mask, flex_tree_mask, tree_mask_for
from gyrectl.train.policy_load import attention_for
from gyrectl.train.step import micro_batch_loss

from agent_shapes import Harness
from train_run import TRAINING, Rollout, make_run, record_calls, rollouts, write_batch

TASKS = {"e0": ("t0", 1.0), "e1": ("t0", 0.0), "e2": ("t0", 0.25), "e3": ("t1", 0.5)}
BUDGETS = (700, 1500)
"""Tokens per micro-batch: neither a multiple of 128; 700 splits the long tree, 1500 packs trees side by side."""

cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="no CUDA device: FlexAttention has no backward on CPU, so the trainer uses it "
                                 "only on a GPU; this compares its loss and gradient with sdpa's there")


@pytest.fixture(scope="module")
def steps(tmp_path_factory, tiny_model_dir, tiny_model):
    """Per budget: the step's batch exactly as ``python -m gyrectl.train`` builds it, and the config."""
    out = {}
    for budget in BUDGETS:
        run = make_run(tmp_path_factory.mktemp(f"flex-{budget}"), tiny_model_dir=tiny_model_dir,
                       training=dataclasses.replace(TRAINING, micro_batch_tokens=budget))
        batch = rollouts(tiny_model, tasks=TASKS, seed=5) + [long_execution("e4", task="t1", reward=1.0, seed=9)]
        record_calls(run, batch)
        write_batch(run, step=0, batch=batch)
        config = load_config(run.config_file)
        out[budget] = (build_step_batch(run=run, config=config, batch=read_batch_file(run=run, step=0)), config)
    return out


def long_execution(execution: str, *, task: str, reward: float, seed: int) -> Rollout:
    """An agent with long messages: its shared prefixes span whole 128-token blocks, so the block
    mask has *full* blocks (every key seen by every query), which short trees never give. Its
    calls carry no logprobs (importance weight 1)."""
    h = Harness(execution, seed, content_len=(30, 90))
    main = [("system", h.text()), ("user", h.text())]
    for turn in range(4):
        reply = h.call(main)
        if turn == 1:
            h.call(main, call_id=f"c{len(h.records)}/1", sample_index=1)  # a parallel sample
        main += [("assistant", reply), ("tool", h.text())]
    records = tuple(dataclasses.replace(r, logprobs=None) for r in h.records)
    return Rollout(execution=execution, task=task, reward=reward, records=records)


def token_mask(block_mask, length: int) -> torch.Tensor:
    """[L, L] bool: what the kernel lets query q see of key kv, block by block."""
    q_block, kv_block = block_mask.BLOCK_SIZE
    out = torch.zeros(length, length, dtype=torch.bool)
    kinds = ((block_mask.kv_num_blocks, block_mask.kv_indices, False),
             (block_mask.full_kv_num_blocks, block_mask.full_kv_indices, True))
    for num_blocks, indices, full in kinds:
        for j in range(num_blocks.shape[-1]):
            q = torch.arange(j * q_block, min((j + 1) * q_block, length))
            for k in indices[0, 0, j, :int(num_blocks[0, 0, j])].tolist():
                kv = torch.arange(k * kv_block, min((k + 1) * kv_block, length))
                assert not out[q[:, None], kv[None, :]].any(), f"block ({j}, {k}) listed twice"
                seen = torch.ones(len(q), len(kv), dtype=torch.bool) if full else \
                    block_mask.mask_mod(0, 0, q[:, None], kv[None, :])
                out[q[:, None], kv[None, :]] = seen
    return out


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_block_mask_read_token_by_token_is_the_dense_mask(steps, budget):
    built, _ = steps[budget]
    kinds = {"full": 0, "partial_off_diagonal": 0, "skipped": 0}
    for micro in built.micro_batches:
        subtree_end = torch.from_numpy(micro.subtree_end)
        block_mask = flex_tree_mask(subtree_end)  # the trainer's call (block 128)
        assert block_mask.seq_lengths == (micro.num_tokens, micro.num_tokens)
        assert torch.equal(token_mask(block_mask, micro.num_tokens), dense_tree_mask(subtree_end)[0, 0])
        blocks = block_mask.kv_indices.shape[-1]
        kinds["full"] += int(block_mask.full_kv_num_blocks.sum())
        kinds["partial_off_diagonal"] += int(block_mask.kv_num_blocks.sum()) - blocks
        kinds["skipped"] += blocks * (blocks + 1) // 2 - int(block_mask.kv_num_blocks.sum()
                                                             + block_mask.full_kv_num_blocks.sum())
    # Not vacuous: lengths off the block grid, and every kind of block the kernel treats apart.
    assert any(m.num_tokens % 128 for m in built.micro_batches)
    assert all(count > 0 for count in kinds.values()), kinds


def load_on_gpu(model_dir, implementation: str, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=implementation)
    return model.to(device="cuda", dtype=dtype).train()  # train(): the trainer's mode (flex compiles per mode)


def loss_and_gradient(model: torch.nn.Module, built: StepBatch, config) -> tuple[float, torch.Tensor]:
    """The step's GRPO loss over all its micro-batches and its gradient (float64, flat)."""
    model.zero_grad(set_to_none=True)
    loss = sum(micro_batch_loss(model=model, micro=m, advantages=built.advantages, training=config.training,
                                device=torch.device("cuda")).loss for m in built.micro_batches)
    loss.backward()
    gradient = torch.cat([p.grad.flatten().double().cpu() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), gradient


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@cuda
@pytest.mark.slow
@pytest.mark.parametrize("budget", BUDGETS)
def test_flex_and_sdpa_train_the_same_on_cuda(steps, tiny_model_dir, budget):
    from torch.nn.attention.flex_attention import BlockMask

    built, config = steps[budget]
    flex_name = attention_for(torch.device("cuda"))
    assert flex_name == "flex_attention"
    figures = {}
    for dtype in (torch.float32, torch.bfloat16):
        for implementation in ("sdpa", flex_name):
            model = load_on_gpu(tiny_model_dir, implementation, dtype)
            # Both paths really differ: a silent fallback to sdpa would make the comparison vacuous.
            assert model.config._attn_implementation == implementation
            mask = tree_mask_for(model, torch.from_numpy(built.micro_batches[0].subtree_end).cuda())
            assert isinstance(mask, BlockMask) == (implementation == flex_name)
            figures[dtype, implementation] = loss_and_gradient(model, built, config)
            del model
    (loss_s, grad_s), (loss_f, grad_f) = figures[torch.float32, "sdpa"], figures[torch.float32, flex_name]
    assert abs(loss_f - loss_s) <= 1e-4 * abs(loss_s)
    assert relative(grad_f, grad_s) <= 1e-4
    # bfloat16: flex's distance to the float32 reference within 1.5x sdpa's own (plus a floor).
    (loss_sb, grad_sb), (loss_fb, grad_fb) = figures[torch.bfloat16, "sdpa"], figures[torch.bfloat16, flex_name]
    assert abs(loss_fb - loss_s) <= 1.5 * abs(loss_sb - loss_s) + 1e-3 * abs(loss_s)
    assert relative(grad_fb, grad_s) <= 1.5 * relative(grad_sb, grad_s) + 1e-3
