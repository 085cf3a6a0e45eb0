"""``dglx bench`` on a typed dataset, the parts that need no processes: the R-GCN both sides
train (the example's math), the kinds of dataset and their systems, the typed preset, and the
typed table with its ratios against DGL's DistDGL and its phases."""
import dataclasses
import importlib.util
from pathlib import Path

import dgl
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.bench.kinds import KINDS, kind_of
from dglx_dist.bench.presets import PRESETS, MagPreset
from dglx_dist.bench.report import TYPED_COLUMNS, markdown, versus_dgl
from dglx_dist.cli import main
from dglx_dist.config import RunConfig
from dglx_dist.data import builtin_path, to_dgl
from dglx_dist.data.mag import MagConfig, mag_dataset, write_mag
from dglx_dist.errors import InvalidValueError
from dglx_dist.models import RGCN, node_inputs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rgcn_hetero.py"
TINY_MAG = MagConfig(scale=1 / 2048, feat_dim=16, num_classes=8)


def _example():
    spec = importlib.util.spec_from_file_location("rgcn_hetero_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mag_graph():
    return to_dgl(mag_dataset(TINY_MAG))


def _step(g, model, embeds, seed: int):
    """Logits and the parameters' gradients of one sampled step (dropout seeded)."""
    papers = torch.nonzero(g.nodes["paper"].data["train_mask"]).squeeze(1)[:32]
    dgl.seed(seed)
    inputs, outputs, blocks = dgl.dataloading.NeighborSampler([4, 4]).sample_blocks(
        g, {"paper": papers})
    torch.manual_seed(seed)
    logits = model(blocks, node_inputs(g, inputs, embeds))
    F.cross_entropy(logits, g.nodes["paper"].data["label"][outputs["paper"]]).backward()
    return logits, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_reference_rgcn_is_the_examples_math(mag_graph):
    """dglx_dist.models.RGCN with the weights of examples/rgcn_hetero.py's RGCN gives the same
    logits and gradients on the same blocks, dropout included."""
    g, example = mag_graph, _example()
    embeds = {nt: torch.nn.Embedding(g.num_nodes(nt), 16) for nt in g.ntypes
              if "feat" not in g.nodes[nt].data}
    theirs = example.RGCN({"paper": 16}, g.etypes, 16, 8, 0.5)
    ours = RGCN({"paper": 16}, g.etypes, 16, 8, num_layers=2, dropout=0.5)
    ours.load_state_dict(theirs.state_dict())  # strict: the same parameters, by name
    logits, grads = _step(g, ours, embeds, seed=3)
    their_logits, their_grads = _step(g, theirs, embeds, seed=3)
    assert logits.shape == (32, 8)
    assert torch.allclose(logits, their_logits, atol=1e-6)
    assert grads.keys() == their_grads.keys() and len(grads) > 10
    assert all(torch.allclose(grads[n], their_grads[n], atol=1e-6) for n in grads)
    x = {nt: torch.arange(3) for nt in g.ntypes}
    assert all(torch.equal(a, b) for a, b in zip(node_inputs(g, x, embeds).values(),
                                                 example.node_inputs(g, x, embeds).values()))


def test_the_same_seed_gives_the_same_weights_whatever_the_relations_order(mag_graph):
    """DGL's DistGraph and ours may list edge types in other orders: the model sorts them."""
    torch.manual_seed(0)
    a = RGCN({"paper": 16}, mag_graph.etypes, 16, 8, num_layers=3)
    torch.manual_seed(0)
    b = RGCN({"paper": 16}, list(reversed(mag_graph.etypes)), 16, 8, num_layers=3)
    assert len(a.layers) == 3
    assert all(torch.equal(p, b.state_dict()[n]) for n, p in a.state_dict().items())


def test_the_rgcn_of_dgl_nn_convs_is_the_same_model(mag_graph):
    """``convs="dgl"`` (``dglx train --convs dgl`` on a typed graph) builds dgl.nn's
    HeteroGraphConv and GraphConv: from the same seed the same parameters by name, and the same
    logits and gradients on the same blocks."""
    g = mag_graph
    embeds = {nt: torch.nn.Embedding(g.num_nodes(nt), 16) for nt in g.ntypes
              if "feat" not in g.nodes[nt].data}
    models = []
    for convs in ("dglx", "dgl"):
        torch.manual_seed(0)
        models.append(RGCN({"paper": 16}, g.etypes, 16, 8, dropout=0.5, convs=convs))
    ours, theirs = models
    assert type(theirs.layers[0]).__module__.startswith("dgl.nn")
    assert type(ours.layers[0]).__module__.startswith("dglx_dist.nn")
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert all(torch.equal(p, theirs.state_dict()[n]) for n, p in ours.state_dict().items())
    (logits, grads), (their_logits, their_grads) = (_step(g, m, embeds, seed=5) for m in models)
    assert torch.allclose(logits, their_logits, atol=1e-5)
    assert all(torch.allclose(grads[n], their_grads[n], atol=1e-5) for n in grads)


def test_the_kind_of_a_dataset_chooses_its_systems(tmp_path):
    from dglx_dist.strategies import STRATEGIES

    write_mag(TINY_MAG, tmp_path / "mag")
    assert kind_of(tmp_path / "mag") == "typed" and kind_of(builtin_path("cora")) == "graph"
    assert PRESETS["mag-small"].kind == "typed" and PRESETS["tiny"].kind == "graph"
    typed = KINDS["typed"].systems({})
    assert set(typed) == {"dgl-distdgl", "auto"} | {n for n in STRATEGIES.names()
                                            if STRATEGIES.get(n).capabilities.typed_graphs}
    assert {"distdgl", "p3"} <= set(typed) and "dorylus" not in typed
    assert KINDS["typed"].model == "rgcn" and KINDS["graph"].model is None
    assert "dgl" in KINDS["graph"].systems({}, "node")


def test_the_typed_preset_is_checked_and_sets_the_r_gcn_run():
    mag = PRESETS["mag-small"]
    assert isinstance(mag, MagPreset) and mag.fanouts == (10, 10)
    run = mag.run(RunConfig())
    assert (run.model.hidden, run.optimizer.lr, run.optimizer.weight_decay, run.loop.epochs) == (
        64, 0.01, 0.0, mag.epochs)
    with pytest.raises(InvalidValueError, match="graph 'nosuch'; choose from"):
        dataclasses.replace(mag, graph="nosuch")
    with pytest.raises(InvalidValueError, match="epochs must be >= 2"):
        dataclasses.replace(mag, epochs=1)


def test_data_key_reads_a_typed_datasets_tables(tmp_path):
    from dglx_dist.bench.datasets import data_key, nonnegative_features

    write_mag(TINY_MAG, tmp_path / "mag")
    key = data_key(tmp_path / "mag")
    assert key.startswith("mag-") and key == data_key(tmp_path / "mag")
    table = next((tmp_path / "mag" / "edges").glob("*.parquet"))
    table.write_bytes(table.read_bytes())  # rewritten: a newer modification time
    assert data_key(tmp_path / "mag") != key
    assert not nonnegative_features(tmp_path / "mag")  # Gaussian paper features


def _typed_row(system, median, acc, run=None, **extra):
    row = {"system": system, "network": "virtual", "epoch_time_median": median,
           "epoch_time_spread": [median - 0.1, median + 0.1], "test_acc": acc,
           "bytes_inter": 1000, "peak_mem_mb": 500.0,
           "phases": {"sample": 0.3, "pull": 0.1, "optimizer": 0.2}, **extra}
    return row | ({"run": run} if run else {})


META = {"command": "dglx bench --preset mag-small", "dataset": "d", "table": "typed",
        "target_acc": None, "target_fraction": 0.95,
        "setup": {"model": "rgcn", "layers": 2, "hidden": 64, "servers": 2,
                  "ranks_per_server": 1, "epochs": 10, "fanouts": "10,10", "batch_size": 128}}


def test_the_typed_table_shows_ratios_against_dgl_and_phases():
    rows = [_typed_row("dgl-distdgl", 1.0, 0.5), _typed_row("distdgl", 0.75, 0.505),
            {"system": "broken", "network": "virtual", "error": "RunFailedError: boom"}]
    text = markdown(rows, META)
    assert "| " + " | ".join(TYPED_COLUMNS) + " |" in text and "| run |" not in text
    assert "| distdgl | virtual |  | 0.75 | 0.65..0.85 | 1,000 |" in text
    assert "| distdgl | 0.75 | 0.5 | 1 | 1 | PASS |" in text  # 0.75x, +0.5 points
    assert "| dgl-distdgl | 0.3 |  | 0.1 |  |  |  | 0.2 |  |" in text  # phases by row
    assert "model rgcn" in text and "fanouts 10,10 per edge type" in text


def test_repeated_runs_pair_by_run_and_end_with_medians():
    rows = [_typed_row("dgl-distdgl", 1.0, 0.5, run=1), _typed_row("distdgl", 0.9, 0.52, run=1),
            _typed_row("dgl-distdgl", 1.0, 0.5, run=2), _typed_row("distdgl", 0.7, 0.5, run=2),
            _typed_row("dgl-distdgl", 2.0, 0.5, run=3), _typed_row("distdgl", 1.5, 0.5, run=3)]
    text = versus_dgl(rows, "typed")
    assert "| 1 | distdgl | 0.9 | 2 | 1 | 1 | FAIL |" in text  # slower than 0.8x, 2 points up
    assert "| 2 | distdgl | 0.7 | 0 | 1 | 1 | PASS |" in text
    assert "| median | distdgl | 0.75 | 0 | 1 | 1 | PASS |" in text
    assert versus_dgl([_typed_row("distdgl", 1.0, 0.5)], "typed") == ""  # no DGL row, no ratios
    assert "| run | system |" in markdown(rows, META)


def test_summarize_gives_the_epoch_times_median_and_range():
    from dglx_dist.bench.harness import summarize

    row = summarize([{"epoch_time": t, "steps": 2} for t in (9.0, 1.0, 4.0, 2.0)])
    assert row["epoch_time_median"] == 2.0 and row["epoch_time_spread"] == [1.0, 4.0]
    assert row["epoch_time"] == round(7 / 3, 4)  # the mean, as before


@pytest.mark.parametrize("argv, words", [
    (["--task", "link"], "--task link: link prediction on a typed graph is not supported yet"),
    (["--model", "gat"], "--model gat: on a typed dataset every system trains the R-GCN"),
    (["--memory-limit", "1000"], "--memory-limit: the typed runs are not checked for memory"),
    (["--row-normalize", "on"], "--row-normalize on: the R-GCN projects"),
    (["--systems", "dorylus,distdgl"], "not for a typed dataset (their strategies do not "
                                       "train graphs with types): dorylus; choose from "
                                       "dgl-distdgl, distdgl, fullgraph, granndis, p3"),
    (["--systems", "nosuch"], "unknown nosuch; choose from dgl-distdgl, distdgl, fullgraph, "
                              "granndis, p3"),
])
def test_bench_on_a_typed_dataset_refuses_in_one_line(argv, words, tmp_path, caplog):
    assert main(["bench", "--preset", "mag-small", "--no-plot", "--out",
                 str(tmp_path / "none"), *argv]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and words in errors[0] and "\n" not in errors[0], errors
    assert not (tmp_path / "none").exists()  # refused before any work


def test_the_link_table_checks_issue_36s_targets():
    """--task link: at most 0.8x DGL's median epoch and fewer inter-server bytes; the test
    MRR's difference is shown, not a target (GraphConv's per-block degrees differ with the
    per-trainer batch: docs/benchmarks.md, "Link quality beside DGL's DistDGL")."""
    def link_row(system, median, nbytes, mrr, run):
        return {"system": system, "network": "emulated-1g", "epoch_time_median": median,
                "bytes_inter": nbytes, "peak_mem_mb": 1000.0, "test_mrr": mrr, "run": run}

    rows = [link_row("dgl-distdgl", 20.0, 2000, 0.30, 1), link_row("distdgl", 15.0, 2200, 0.28, 1),
            link_row("p3", 30.0, 1500, 0.30, 1), link_row("dgl-distdgl", 20.0, 2000, 0.30, 2),
            link_row("distdgl", 15.0, 1800, 0.28, 2), link_row("p3", 30.0, 1500, 0.30, 2)]
    text = versus_dgl(rows, "link")
    assert "(targets: epoch time <= 0.8x, fewer inter-server bytes)" in text
    assert "| run | system | epoch_time_vs_dgl | test_mrr_points_vs_dgl |" in text
    assert "| 1 | distdgl | 0.75 | -2 | 1.1 | 1 | FAIL |" in text  # fast, more bytes
    assert "| 2 | distdgl | 0.75 | -2 | 0.9 | 1 | PASS |" in text
    assert "| 1 | p3 | 1.5 | 0 | 0.75 | 1 | FAIL |" in text  # fewer bytes, slow
    assert "| median | distdgl | 0.75 | -2 | 1 | 1 | FAIL |" in text  # 1.0x: not fewer
    meta = META | {"table": None, "setup": META["setup"] | {"task": "link"}}
    assert "Against DGL's DistDGL in the same run" in markdown(rows, meta)
