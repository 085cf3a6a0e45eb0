"""A step's state travels with its blocks through what DGL scripts do to them: a plain list of
the blocks moved (``[b.to(device) for b in blocks]``) or cast (``.int()``, ``.long()``) gives
the model the same state; a strategy's static blocks, yielded at two steps, keep each step's
own; blocks that name a step's nodes read as DGL's do."""
import dgl
import pytest
import torch

from dglx_dist.dgl.blocks import to_dgl_block
from dglx_dist.errors import InvalidValueError
from dglx_dist.strategies.steps import Blocks, StepState, node_blocks


def _blocks():
    g = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
    return dgl.dataloading.MultiLayerFullNeighborSampler(2).sample_blocks(g, torch.tensor([0]))[2]


@pytest.mark.parametrize("move", [lambda b: b.to(torch.device("cpu")), lambda b: b.int(),
                                  lambda b: b.int().long(), lambda b: b])
def test_the_state_survives_a_scripts_moves_and_casts(move):
    state = StepState(rows=torch.tensor([1]), weight=0.5, epoch=3)
    blocks = Blocks(_blocks(), state)
    moved = [move(b) for b in blocks]
    assert type(moved) is list
    assert Blocks.of(moved).state is state
    assert Blocks.of(blocks) is blocks


def test_static_blocks_yielded_twice_keep_each_steps_state():
    static = _blocks()
    first, second = Blocks(static, StepState(epoch=0)), Blocks(static, StepState(epoch=1))
    assert [Blocks.of(list(b)).state.epoch for b in (first, second)] == [0, 1]
    assert first[0].srcdata[dgl.NID] is static[0].srcdata[dgl.NID]  # the structure is shared
    assert Blocks.of(static).state == StepState()  # blocks of no loader: the default


def test_blocks_of_two_steps_are_refused():
    static = _blocks()
    first, second = Blocks(static, StepState(epoch=0)), Blocks(static, StepState(epoch=1))
    with pytest.raises(InvalidValueError, match="different steps"):
        Blocks.of([first[0], second[1]])


def test_node_blocks_read_as_dgls():
    inputs, outputs = torch.tensor([5, 7, 9, 11]), torch.tensor([7, 11])
    blocks = [to_dgl_block(b) for b in node_blocks(inputs, outputs, 2)]  # as a script gets them
    assert len(blocks) == 2 and all(b.is_block and b.num_edges() == 0 for b in blocks)
    assert blocks[0].srcdata[dgl.NID].tolist() == inputs.tolist()
    assert blocks[-1].dstdata[dgl.NID].tolist() == outputs.tolist()
    assert blocks[-1].number_of_dst_nodes() == 2 and blocks[0].number_of_dst_nodes() == 4


def test_the_package_blocks_carry_the_state_too():
    """The model gets the package's blocks: the state rides on them, also through ``to``;
    DGL's door makes them DGL's (a DGL script's loader, a model of dgl.nn's modules) with
    the state."""
    from dglx_dist.dgl.blocks import dgl_blocks

    state = StepState(epoch=2)
    blocks = Blocks(node_blocks(torch.tensor([5, 7]), torch.tensor([7]), 2), state)
    assert Blocks.of([b.to("meta") for b in blocks]).state is state
    handed = dgl_blocks(blocks)
    assert all(isinstance(b, dgl.DGLGraph) for b in handed) and handed.state is state
    assert Blocks.of(list(handed)).state is state
