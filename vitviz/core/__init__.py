"""The plain utilities every layer stands on: printable text, the user-facing error, console
lines, devices, finiteness and layer choices (rank 0), and the files a user names or vitviz
ships (rank 2: file kinds, resources, the last model). Imports nothing: ``vitviz.core.errors``
costs what its own module costs."""
