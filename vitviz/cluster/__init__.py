"""Running a command's per-image work on an engine (DESIGN §7): the items and their outcomes,
the inputs (folders, globs, lists of paths), the in-order reduction, the run record and the
Ray engine. Ray is imported only by ``ray_engine``, when it runs; nothing here imports torch."""
