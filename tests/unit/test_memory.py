"""SavedBytes: the activation memory the Trainer reports as peak_saved_mb."""
import torch

from dglx_dist.memory import SavedBytes


def test_saved_bytes_counts_each_saved_storage_once_and_keeps_the_peak():
    lin = torch.nn.Linear(10, 5)
    saved = SavedBytes()
    for rows in (100, 40):
        saved.start()
        x = torch.randn(rows, 10)
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
            y = torch.relu(lin(x))
            z = y * y  # saves y twice: one storage
        z.sum().backward()
    # the larger forward: x (for the weight's gradient; x needs none, so the weight is not
    # saved) and relu's output (saved by relu, and twice by the product: one storage)
    assert saved.peak == 100 * 10 * 4 + 100 * 5 * 4
    saved.reset()
    assert saved.peak == 0


def test_saved_bytes_counts_a_sparse_tensor_by_its_indices_and_values():
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [1, 0, 2]]),
                                     torch.tensor([1.0, 2.0, 3.0]), (3, 3)).requires_grad_(True)
    dense = torch.randn(3, 4, requires_grad=True)
    saved = SavedBytes()
    saved.start()
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
        torch.sparse.mm(sparse, dense).sum().backward()
    # the sparse operand: 2 x 3 int64 indices + 3 float32 values; the dense one: 3 x 4 float32
    assert saved.peak == 2 * 3 * 8 + 3 * 4 + 3 * 4 * 4
