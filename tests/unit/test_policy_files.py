"""Which rank writes which tensor of an exported weights folder, and which names are aliases."""

from __future__ import annotations

import torch

from gyrectl.train.policy_export import assign_files, file_name
from gyrectl.train.policy_load import tied_aliases


def test_every_tensor_goes_to_one_part_largest_first_onto_the_lightest():
    sizes = {"embed": 100, "head": 100, "a": 60, "b": 40, "c": 30, "d": 10}
    owner = assign_files(sizes, parts=2)
    assert set(owner) == set(sizes)
    assert owner == {"embed": 0, "head": 1, "a": 0, "b": 1, "c": 1, "d": 0}
    load = [sum(sizes[n] for n, p in owner.items() if p == part) for part in (0, 1)]
    assert load == [170, 170]


def test_the_assignment_does_not_depend_on_the_order_names_come_in():
    sizes = {f"t{i}": (i * 7919) % 101 for i in range(50)}
    shuffled = dict(sorted(sizes.items(), key=lambda kv: hash(kv[0]) % 13))
    assert assign_files(sizes, parts=3) == assign_files(shuffled, parts=3)


def test_more_parts_than_tensors_leaves_parts_without_a_file():
    assert assign_files({"only": 5}, parts=4) == {"only": 0}


def test_file_names_follow_the_hf_sharded_pattern():
    assert file_name(0, parts=2) == "model-00001-of-00002.safetensors"
    assert file_name(11, parts=12) == "model-00012-of-00012.safetensors"


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4)
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 8, bias=False)
        self.head.weight = self.embed.weight


def test_a_tied_head_is_an_alias_of_the_embedding():
    assert tied_aliases(Tied()) == {"head.weight"}
    untied = Tied()
    untied.head.weight = torch.nn.Parameter(untied.embed.weight.detach().clone())
    assert tied_aliases(untied) == set()
