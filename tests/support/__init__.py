"""Test support: find or start PostgreSQL, pick ports, run Relay and executor processes.

Nothing here imports the application packages, so these helpers work before (and whatever) the app code is.
Import them as ``from tests.support import pg, ports, procs`` (``tests/conftest.py`` puts the repository
root on ``sys.path`` so that this works with a plain ``pytest`` too).
"""
