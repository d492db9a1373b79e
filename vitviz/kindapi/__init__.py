"""The kind contract: what the shared layers ask of a model kind, torch-free, beneath everything
that uses it (DESIGN §3)."""
