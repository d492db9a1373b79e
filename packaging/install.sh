#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv and install vitviz into it.
#   bash packaging/install.sh          # the app
#   bash packaging/install.sh --test   # the app + test and lint tools
#   bash packaging/install.sh --check-qt  # only check the system libraries the window needs
# torch and torchvision are resolved together, as a pair that pin each other, before the project:
# a torch picked alone can be a build that the registry's torchvision cannot load against.
set -euo pipefail
cd "$(dirname "$0")/.."

# Qt's X11 window plugin aborts the app when a system library of its is missing: name the
# missing ones and print the exact install command (vitviz/qt_deps.py). Never fails the install.
check_qt_libs() {
    .venv/bin/python -m vitviz.qt_deps || true
}
if [[ "${1:-}" == "--check-qt" ]]; then
    check_qt_libs
    exit 0
fi

extras=""
[[ "${1:-}" == "--test" ]] && extras="[test]"

PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
    "$PYTHON" -m venv .venv
fi
pip_install() { .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"; }

case "$(uname -m)" in
    x86_64|AMD64) torch_pair=("torch==2.14.1" "torchvision==0.29.1") ;;
    *)            torch_pair=("torch==2.9.1" "torchvision==0.24.1") ;;
esac

if ! .venv/bin/python - <<'PY' 2>/dev/null
import torch, torchvision.ops  # noqa: F401  (fails when the two builds do not match)
torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
PY
then
    echo "vitviz: installing ${torch_pair[*]} (a few GB, a few minutes the first time)" >&2
    pip_install "${torch_pair[@]}"
fi
pip_install -e ".${extras}"
check_qt_libs
