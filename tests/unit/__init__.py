"""Unit tests (a package, so module basenames may repeat across tests/unit and tests/integration)."""
