"""From a model and images to numbers and files: the memory plan, the capture pass, ``analyze``,
batches, the export writer and the statistics over a folder. Imports nothing: each module is
imported by name (``vitviz.pipeline.analysis``), so importing one loads only what it needs."""
