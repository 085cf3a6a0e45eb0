"""``dglx datagen | data import | partition | partitioners | demo``: datasets and partitions."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from dglx_dist.cli_flags import add_flags, flag_names, from_args, parse_key_values
from dglx_dist.errors import InvalidValueError
from dglx_dist.report import print_line as _out

__all__ = ["COMMANDS"]


@dataclasses.dataclass(frozen=True)
class _Generator:
    """A dataset generator behind ``dglx datagen``: its config (whose fields are flags), its
    presets, and how it writes a directory (returning meta.json's contents)."""

    title: str
    config: type
    presets: dict[str, Any]
    write: Callable[[Any, Path, argparse.Namespace], dict[str, Any]]


def _generators() -> list[_Generator]:
    """The homogeneous generator first: it runs when no preset is named."""
    from dglx_dist.data.mag import MAG_PRESETS, MagConfig, write_mag
    from dglx_dist.data.synthetic import SYNTHETIC_PRESETS, SyntheticConfig, write_synthetic

    def synthetic(config, out, args):
        return write_synthetic(config, out, overwrite=args.overwrite, progress=True,
                               memory_limit=args.memory_limit).to_json()

    def mag(config, out, args):
        return write_mag(config, out, overwrite=args.overwrite, memory_limit=args.memory_limit)

    return [_Generator("community graph (no preset, products, papers)", SyntheticConfig,
                       SYNTHETIC_PRESETS, synthetic),
            _Generator("typed graph shaped like ogbn-mag (--preset mag, mag-small)", MagConfig,
                       MAG_PRESETS, mag)]


def _given_flags(args: argparse.Namespace, gen: _Generator) -> list[str]:
    return [f"--{d.replace('_', '-')}" for d in flag_names(gen.config) if hasattr(args, d)]


def _cmd_datagen(args: argparse.Namespace) -> int:
    gens = _generators()
    gen = next((g for g in gens if args.preset in g.presets), gens[0])
    mine = set(_given_flags(args, gen))
    foreign = sorted({f for g in gens for f in _given_flags(args, g)} - mine)
    if foreign:
        preset = f" --preset {args.preset}" if args.preset else ""
        raise InvalidValueError(f"dglx datagen{preset}: {', '.join(foreign)} not accepted "
                                f"(flags of another generator; this one makes a {gen.title})")
    if (args.out is None) == (args.out_flag is None):
        raise InvalidValueError("dglx datagen: name the dataset directory to create once, as "
                                "OUT or --out OUT")
    out = args.out or args.out_flag
    config = from_args(gen.config, args, gen.presets.get(args.preset))
    _out(json.dumps({"out": str(out), **gen.write(config, out, args)}))
    return 0


def _partition_dataset(args: argparse.Namespace) -> int:
    from dglx_dist.partition import partition_dataset

    _refuse_options(args, _IMPORT_ONLY, "only with --from-dgl")
    report = partition_dataset(args.data, args.out, args.method or "metis",
                               2 if args.parts is None else args.parts,
                               parse_key_values(args.opt), overwrite=args.overwrite,
                               progress=True, memory_limit=args.memory_limit,
                               nonfinite=args.nonfinite)
    _out(report.to_markdown())
    _out(json.dumps(report.to_json()))
    return 0


def _import_dgl(args: argparse.Namespace) -> int:
    from dglx_dist.partition import PartitionDir, import_dgl_partitions

    _refuse_options(args, _DATASET_ONLY, "--from-dgl keeps DGL's parts as they are")
    out = import_dgl_partitions(args.data, args.out, args.overwrite, orig_nids=args.orig_nids,
                                orig_eids=args.orig_eids, num_classes=args.num_classes,
                                keys=parse_key_values(args.key, "--key"),
                                nonfinite=args.nonfinite, progress=True)
    m = PartitionDir(out).manifest
    _out(json.dumps({"out": str(out), **{k: m[k] for k in (
        "num_parts", "num_nodes", "num_edges", "feat_dim", "num_classes", "relabeled")},
        "core_per_part": [e["num_core"] for e in m["parts"]],
        "halo_per_part": [e["num_halo"] for e in m["parts"]],
        "edges_per_part": [e["num_edges"] for e in m["parts"]],
        "edge_cut": m["dataset"]["edge_cut"], "not_imported": m["dataset"]["not_imported"],
        **({"types": m["types"]} if "types" in m else {})}))
    return 0


_DATASET_ONLY = ("method", "parts", "opt", "memory_limit")
_IMPORT_ONLY = ("orig_nids", "orig_eids", "num_classes", "key")
_PARTITION_SOURCES: dict[str, Callable[[argparse.Namespace], int]] = {
    "dataset": _partition_dataset, "dgl": _import_dgl}
"""``dglx partition`` by its source: a dataset directory, or DGL's partitions."""


def _refuse_options(args: argparse.Namespace, names: Sequence[str], why: str) -> None:
    given = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is not None]
    if given:
        raise InvalidValueError(f"dglx partition: {', '.join(given)} not accepted ({why})")


def _cmd_demo(args: argparse.Namespace) -> int:
    from dglx_dist.demo import partition_demo, training_demo

    verbose = args.log_level == "DEBUG"
    _out(partition_demo(args.dataset, args.parts, verbose))
    if args.no_train:
        return 0
    _out(f"\n## distdgl training on {args.nproc} local processes (torchrun, gloo)\n")
    table, records = training_demo("distdgl", args.nproc, args.epochs, args.dataset,
                                   verbose=verbose, metrics_out=args.metrics_out)
    _out(table)
    _out(f"\ntest accuracy: {records[-1]['test_acc']:.4f}")
    return 0


_MEMORY_LIMIT = {"type": int, "default": None, "metavar": "BYTES", "help": "refuse when the "
                 "estimated peak exceeds this (default: available memory)"}


def _add_datagen(p: argparse.ArgumentParser) -> None:
    gens = _generators()
    p.add_argument("out", type=Path, nargs="?", help="dataset directory to create")
    p.add_argument("--out", dest="out_flag", type=Path, metavar="OUT", help="the same, as a flag")
    p.add_argument("--preset", choices=[name for g in gens for name in g.presets],
                   help="a graph shaped like ogbn-products or ogbn-papers100M (nodes, edges, "
                        "features, classes, split), or a typed one like ogbn-mag (mag; "
                        "mag-small is 1/256 of it); the flags of its generator change it")
    added: set[str] = set()
    for gen in gens:  # a flag two generators share is added once, with the first one's help
        shared = [f"--{d.replace('_', '-')}" for d in flag_names(gen.config) if d in added]
        group = p.add_argument_group(gen.title, f"also {', '.join(shared)} (above; the "
                                     "preset's values unless given)" if shared else None)
        add_flags(group, gen.config, overlay=True, skip=added)  # over --preset's values
        added |= set(flag_names(gen.config))
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--memory-limit", **_MEMORY_LIMIT)


def _add_partition(p: argparse.ArgumentParser) -> None:
    p.add_argument("data", type=Path, help="dataset directory (see docs/dataset_format.md); with "
                   "--from-dgl, the GRAPH_NAME.json written by dgl.distributed.partition_graph")
    p.add_argument("out", type=Path, help="partition directory to create")
    p.add_argument("--from-dgl", dest="source", action="store_const", const="dgl",
                   default="dataset", help="import DGL's partitions as they are (same parts, "
                   "same node ids; no repartitioning; a heterograph's become typed partitions); see "
                   "docs/partition_format.md")
    p.add_argument("--method", help="registered partitioner (default: metis)")
    p.add_argument("--parts", type=int, help="number of parts (default: 2)")
    p.add_argument("--opt", action="append", metavar="KEY=VALUE",
                   help="partitioner option, repeatable (see `dglx partitioners`)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT once the new one is done")
    p.add_argument("--memory-limit", **_MEMORY_LIMIT)
    p.add_argument("--nonfinite", choices=("reject", "warn"), default="reject",
                   help="NaN / Inf features: refuse the dataset (default) or warn and go on")
    g = p.add_argument_group("with --from-dgl")
    g.add_argument("--orig-nids", type=Path, metavar="FILE", help="the input graph's id of each "
                   "DGL node id: partition_graph(..., return_mapping=True)'s first result saved "
                   "with np.save (.npy) or torch.save (.pt); for a heterograph its dict by node "
                   "type, saved with torch.save (.pt) or np.savez (.npz); default: DGL's ids "
                   "are kept as the original ids")
    g.add_argument("--orig-eids", type=Path, metavar="FILE", help="the same for edge ids (its "
                   "second result; for a heterograph a dict by canonical edge type, .npz keys "
                   "written src:rel:dst)")
    g.add_argument("--num-classes", type=int, help="default: the largest label plus one")
    g.add_argument("--key", action="append", metavar="OURS=NAME", help="name of a node data "
                   "field in node_feat.dgl, without DGL's NTYPE/ prefix, repeatable; OURS is "
                   "feat, label, train, val or test (defaults: feat, label, train_mask, "
                   "val_mask, test_mask; for a heterograph the default label is label or "
                   "labels)")


def _add_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="cora", help="built-in dataset (default: cora)")
    p.add_argument("--parts", type=int, default=4, help="parts for the partition reports")
    p.add_argument("--nproc", type=int, default=2, help="training processes (default: 2)")
    p.add_argument("--epochs", type=int, default=60, help="training epochs (default: 60)")
    p.add_argument("--no-train", action="store_true", help="partition reports only")
    p.add_argument("--metrics-out", type=Path, metavar="FILE", help="append each training "
                   "epoch's metrics record to FILE as a JSON line")


def _import_ogb(args: argparse.Namespace) -> int:
    from dglx_dist.data.ogb_import import import_ogb

    ds = import_ogb(args.name, args.out, args.ogb_root, overwrite=args.overwrite,
                    directed=args.directed, download=args.download)
    split = {m: int(sum(n.masks()[m].sum() for n in ds.nodes.values()))
             for m in ("train", "val", "test")}
    _out(json.dumps({"out": str(args.out), "name": args.name, "task": ds.extra["task"],
                     "num_nodes": ds.num_nodes, "num_edges": ds.num_edges,
                     "num_classes": ds.num_classes, "edges": ds.extra["edges"],
                     **({"split": split} if ds.extra["task"] == "node" else {}),
                     **({} if ds.untyped else {"ntypes": ds.ntypes})}))
    return 0


def _add_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="OGB's name of the dataset: ogbn-* (node "
                   "classification; ogbn-mag as a typed dataset) or ogbl-* (link prediction "
                   "on a graph without types)")
    p.add_argument("out", type=Path, metavar="OUT", help="dataset directory to create")
    p.add_argument("--ogb-root", type=Path, metavar="ROOT", help="where OGB keeps its datasets "
                   "(ROOT/ogbn_arxiv/...), or downloads them to (default: OGB's own, ./dataset)")
    p.add_argument("--no-download", dest="download", action="store_false",
                   help="refuse, instead of letting OGB download, a dataset ROOT lacks")
    p.add_argument("--directed", action="store_true", help="keep a node task's edges as OGB "
                   "lists them (default: each edge OGB lists one way also the other way; "
                   "ogbn-mag's relations reversed as rev-REL)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if dglx wrote it")


# ``dglx data ACTION``: (help, add the arguments, run)
_DATA_ACTIONS: dict[str, tuple[str, Callable, Callable]] = {
    "import": ("write an OGB dataset (through the ogb package, pip install 'dglx_dist[ogb]') "
               "as a dataset directory with OGB's split", _add_import, _import_ogb),
}


def _add_data(p: argparse.ArgumentParser) -> None:
    from dglx_dist.cli import _add_commands  # (it imports this module)

    _add_commands(p, _DATA_ACTIONS, "data_action", metavar="ACTION")  # each sets its run


def _cmd_partitioners(args: argparse.Namespace) -> int:
    from dglx_dist.partition import PARTITIONERS

    _out(PARTITIONERS.options_markdown())
    return 0


# name: (help, add the arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "datagen": ("write a synthetic graph as a dataset directory (a community graph, or a "
                "typed one shaped like ogbn-mag)", _add_datagen,
                _cmd_datagen),
    "data": ("datasets from elsewhere: `dglx data import ogbn-arxiv DIR` writes OGB's as a "
             "dataset directory", _add_data, None),
    "partition": ("partition a dataset directory and print the quality report, or import the "
                  "partitions of DGL's partition_graph (--from-dgl)", _add_partition,
                  lambda args: _PARTITION_SOURCES[args.source](args)),
    "partitioners": ("list registered partitioners and their options", lambda p: None,
                     _cmd_partitioners),
    "demo": ("partition the built-in Cora with every partitioner, then train on 2 local "
             "processes", _add_demo, _cmd_demo),
}
