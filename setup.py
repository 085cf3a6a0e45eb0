"""Packaging for dglx_dist.

The pins are the combination checked to import and run DGL 2.1 (its METIS, samplers and
dgl.distributed) on Python 3.11; see docs/install.md for why each one is there.
"""
from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    "torch==2.2.1",
    "dgl==2.1.0",
    "torchdata==0.7.1",
    "numpy<2",
    "scipy<1.15",
    "pandas<3",
    "pyarrow<20",
    "pymetis",
    "setuptools<70",
    # DGL's own imports need these.
    "pydantic",
    "pyyaml",
    "psutil",
    "tqdm",
]

# The static site (`make docs`); tests/unit/test_docs.py builds it with --strict, so the test
# extra carries the same pins.
DOCS = ["mkdocs==1.6.1", "mkdocs-material==9.8.1", "mkdocstrings[python]==1.0.8",
        "mkdocstrings-python==2.0.11", "griffelib==2.4.1"]

EXTRAS = {
    "test": ["pytest>=7", "pytest-timeout", "hypothesis", "boto3", "matplotlib", *DOCS],
    "docs": DOCS,
    "aws": ["boto3"],
    "plot": ["matplotlib"],
}

setup(
    name="dglx_dist",
    version="0.1.0",
    description="Distributed GNN training strategies (DistDGL, P3, GraNNDis, Dorylus) for DGL",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["dglx_dist", "dglx_dist.*"]),
    package_data={"dglx_dist.data": ["builtin/*/*.parquet", "builtin/*/*.json"]},
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": ["dglx=dglx_dist.cli:main"],
        # Third-party plug-ins register here; see docs/partitioners.md.
        "dglx_dist.partitioners": [],
        "dglx_dist.executors": [],
        "dglx_dist.dorylus_layers": [],
    },
)
