#!/usr/bin/env bash
# Build the stand-alone one-folder app with PyInstaller into dist/vitviz/ and check it:
#   bash packaging/bundle/build.sh
# Uses the project's .venv (run packaging/install.sh first). The bundle carries the torch build
# that venv has (on x86-64 Linux the CUDA build: a few GB; install.sh --cpu makes a smaller one).
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/python -m pip install --quiet --disable-pip-version-check "pyinstaller>=6.10"
.venv/bin/python -m PyInstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller \
    packaging/bundle/vitviz.spec
echo "bundle: dist/vitviz ($(du -sh dist/vitviz | cut -f1))"
QT_QPA_PLATFORM=offscreen dist/vitviz/vitviz --self-test
