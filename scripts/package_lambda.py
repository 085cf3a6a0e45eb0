"""Builds the AWS Lambda deployment zip of the tensor tasks and says how to deploy it.

The zip holds the numpy-only tensor tasks under their package names:
``dglx_dist/offload/tensor_fn/`` (payload format, task table, handler) and, from
``dglx_dist/convs/``, ``ops_base.py`` and every conv folder's ``__init__.py`` and ``ops.py``
(the tasks themselves, one folder per conv type). ``dglx_dist``, ``dglx_dist.offload`` and
``dglx_dist.convs`` get empty ``__init__.py`` files of their own there (the real ones lead to
the executors, torch and DGL), so the handler is
``dglx_dist.offload.tensor_fn.handler.lambda_handler``. numpy is not in the zip: it
comes from a Lambda layer. The AWS SDK for pandas managed layer (``AWSSDKPandas-Python311``,
published by AWS in every region under account 336392948345) ships numpy for Python 3.11;
its version number per region is listed at
https://aws-sdk-pandas.readthedocs.io/en/stable/layers.html, or ask AWS::

    aws lambda list-layer-versions --region us-east-1 --compatible-runtime python3.11 \\
        --layer-name arn:aws:lambda:us-east-1:336392948345:layer:AWSSDKPandas-Python311

(A layer of your own works too: ``pip install "numpy<2" -t python/`` on Amazon Linux, zip the
``python/`` folder, ``aws lambda publish-layer-version``.)

Usage::

    python scripts/package_lambda.py                       # -> dist/dglx-tensor-fn.zip
    python scripts/package_lambda.py --out /tmp/fn.zip --region eu-west-1 --memory-mb 1024

Prints the zip's path and the ``aws lambda create-function`` command on stdout.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dglx_dist"
HANDLER = "dglx_dist.offload.tensor_fn.handler.lambda_handler"
_STUB = b'"""The numpy-only tensor tasks alone: the zip of scripts/package_lambda.py."""\n'
_STUBS = ("__init__.py", "offload/__init__.py", "convs/__init__.py")
LAYER = "arn:aws:lambda:{region}:336392948345:layer:AWSSDKPandas-Python311:{version}"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same zip


def sources() -> list[Path]:
    """The package's files the zip holds (see the module docstring)."""
    kit = sorted((PACKAGE / "offload" / "tensor_fn").glob("*.py"))
    if not any(p.name == "handler.py" for p in kit):
        raise FileNotFoundError(f"{PACKAGE}/offload/tensor_fn/handler.py is missing; run from a "
                                "dglx_dist checkout")
    convs = PACKAGE / "convs"
    folders = sorted(d for d in convs.iterdir() if (d / "ops.py").is_file())
    return kit + [convs / "ops_base.py"] + [d / f for d in folders
                                            for f in ("__init__.py", "ops.py")]


def _write(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def build_zip(out: Path) -> list[str]:
    """Writes the zip to ``out``; returns the archive names it holds."""
    files = sources()
    out.parent.mkdir(parents=True, exist_ok=True)
    names = []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for stub in _STUBS:
            _write(zf, f"dglx_dist/{stub}", _STUB)
            names.append(f"dglx_dist/{stub}")
        for path in files:
            name = path.relative_to(ROOT).as_posix()
            _write(zf, name, path.read_bytes())
            names.append(name)
    return names


def deploy_command(args: argparse.Namespace, zip_path: Path) -> str:
    """The ``aws lambda create-function`` command for the built zip."""
    layer = args.layer_arn or LAYER.format(region=args.region, version="<VERSION>")
    cmd = ["aws", "lambda", "create-function", "--region", args.region,
           "--function-name", args.function_name, "--runtime", "python3.11",
           "--architectures", "x86_64", "--handler", HANDLER,
           "--zip-file", f"fileb://{zip_path}", "--role", args.role_arn,
           "--memory-size", str(args.memory_mb), "--timeout", str(args.timeout_s),
           "--layers", layer,
           "--environment", "Variables={OMP_NUM_THREADS=1,OPENBLAS_NUM_THREADS=1}"]
    return " ".join(shlex.quote(c) if "<" not in c else c for c in cmd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "dglx-tensor-fn.zip")
    parser.add_argument("--function-name", default="dglx-tensor-fn")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--memory-mb", type=int, default=512)
    parser.add_argument("--timeout-s", type=int, default=60)
    parser.add_argument("--role-arn", default="arn:aws:iam::<ACCOUNT>:role/<LAMBDA_EXEC_ROLE>",
                        help="execution role (needs only AWSLambdaBasicExecutionRole)")
    parser.add_argument("--layer-arn", default="",
                        help="layer providing numpy (default: AWSSDKPandas-Python311)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    names = build_zip(out)
    print(out)
    print(f"# {len(names)} files: {', '.join(names)}; handler {HANDLER}")
    print(deploy_command(args, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
