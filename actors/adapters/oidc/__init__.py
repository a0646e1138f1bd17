"""Identity provider adapters (issue 31): discovery, signing keys, and token checks."""
