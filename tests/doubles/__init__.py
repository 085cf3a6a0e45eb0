"""Test doubles the tests import as ``tests.doubles.NAME`` (pytest.ini puts the repository root
on ``sys.path``); not part of the package:

* :mod:`.invoke_api`: a local HTTP endpoint speaking AWS Lambda's Invoke API, serving the
  tensor-task handler, for the ``aws`` executor's tests;
* :mod:`.fuzz`: shared hypothesis settings and hostile values for the loader fuzz tests.

The executor that injects faults (``faulty-local``) is a plug-in: tests/plugins/dglx_test_plugins.
"""
