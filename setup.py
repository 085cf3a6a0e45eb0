"""Packaging for dglx_dist.

install_requires holds ranges: lower bounds from the oldest supported DGL/torch builds or the
oldest checked release, upper bounds only where a break is known for every combination. Bounds
that hold only for some DGL/torch pairs (numpy<2 with torch<2.3, torchdata<0.8 and
setuptools<70 with DGL 2.1) cannot be said in install_requires; they live in the constraints
file of the checked stack (constraints/cpu-py311.txt), which `make` installs with. The matrix
(tested, checked, expected) is in docs/install.md.
"""
from setuptools import find_packages, setup

# What the package needs (its install_requires): `make test-core` installs these, newest,
# without DGL.
CORE_REQUIRES = [
    "torch>=2.0",  # DGL 2.1 supports torch 2.0-2.2, DGL 2.4 up to 2.4; the core runs on newer
    "numpy>=1.26",  # numpy 2 too, except with torch < 2.3 (the constraints file pins < 2)
    "pyarrow>=19",
    "scipy>=1.14",
    "cmeel-metis>=5.2.1",  # the METIS library (libmetis.so) our binding loads
    "psutil",
    "tqdm",
]

# DGL is an extra (`pip install dglx-dist[dgl]`): the training path needs none of it (the
# package's blocks, samplers, convs and graphs are torch). It serves what is DGL's own: the
# runner of DistDGL scripts, dgl.nn models, DGL's samplers other than NeighborSampler, --from-dgl
# imports and the DGL rows of `dglx bench`.
# DGL has no wheels for Python 3.13: there the extra installs nothing, and what needs DGL says
# so in one line (the package trains without it).
_HAS_DGL = '; python_version < "3.13"'
DGL_REQUIRES = [
    # DGL 2.1 is the newest on the package index (CPU); DGL 2.2-2.4 come from DGL's wheel site,
    # one build per torch version. DGL declares none of the torch pairing.
    "dgl>=2.1" + _HAS_DGL,
    # DGL's own undeclared imports (graphbolt, dgl.data, dgl.utils in DGL 2.1).
    "pydantic" + _HAS_DGL,
    "pyyaml" + _HAS_DGL,
    "pandas" + _HAS_DGL,
    "setuptools" + _HAS_DGL,
]

# The static site (`make docs`); tests/unit/test_docs.py builds it with --strict, so a newer
# release can fail a test by a new warning: the versions checked are in the constraints file.
DOCS = ["mkdocs>=1.6.1", "mkdocs-material>=9.8", "mkdocstrings[python]>=1.0.8",
        "mkdocstrings-python>=2.0.11", "griffelib>=2.4"]

# What the tests need besides the package (`make test-core` installs these with CORE_REQUIRES).
# torch_geometric: PyG's convs on the package's blocks (tests/unit/test_pyg.py, the PyG example);
# pure Python, it needs no DGL.
TEST_REQUIRES = ["pytest>=7", "pytest-timeout", "pytest-xdist", "hypothesis", "boto3",
                 "torch_geometric"]

# `dglx data import` (OGB's datasets without DGL): OGB's own package, which pulls pandas and
# scikit-learn (about 60 MB installed beside the checked stack, 5 s); 1.3.6 is the release
# whose master.csv and file layout were checked (tests/unit/test_ogb_import.py).
OGB = ["ogb>=1.3.6"]

EXTRAS = {
    "dgl": DGL_REQUIRES,
    # the whole suite compares with DGL, so it needs the dgl extra too (`make test` installs both)
    # matplotlib, torchmetrics: a DGL script's metrics; OGB: tests/unit/test_ogb_import.py
    "test": [*TEST_REQUIRES, "matplotlib", "torchmetrics", *DOCS, *OGB],
    "docs": DOCS,
    "aws": ["boto3"],
    "plot": ["matplotlib"],
    "ogb": OGB,
}

setup(
    name="dglx_dist",
    version="0.1.0",
    description="Distributed GNN training strategies (DistDGL, P3, GraNNDis, Dorylus) for DGL",
    python_requires=">=3.10,<3.14",  # 3.13 without DGL (the [dgl] extra's marker)
    # What was run (docs/install.md's matrix): 3.11 the whole suite in CI, 3.12 and 3.13 the
    # DGL-free core's tests (make test-core) by hand; 3.10 only expected to work, so not listed.
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    packages=find_packages(include=["dglx_dist", "dglx_dist.*"]),
    package_data={"dglx_dist.data": ["builtin/*/*.parquet", "builtin/*/*.json"]},
    install_requires=CORE_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": ["dglx=dglx_dist.cli:run"],
        # Third-party plug-ins register in these groups (docs/architecture.md, "Adding your
        # own"; tests/plugins/ has one of each). A conv type's adapter (dglx_dist.layers) also
        # says how dorylus runs it.
        "dglx_dist.strategies": [],
        "dglx_dist.partitioners": [],
        "dglx_dist.layers": [],
        "dglx_dist.executors": [],
    },
)
