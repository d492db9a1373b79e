#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv and install vitviz into it.
#   bash packaging/install.sh             # the app (PyPI's torch: on x86-64 Linux its CUDA build)
#   bash packaging/install.sh --cpu       # the app with the CPU build of torch (no NVIDIA GPU)
#   bash packaging/install.sh --families  # + timm, transformers, open_clip: the other families
#   bash packaging/install.sh --test      # + the test and lint tools (and the libraries above)
#   bash packaging/install.sh --check-qt  # only check the system libraries the window needs
# --cpu, --families and --test combine (e.g. --cpu --test). docs/install.md says more.
# torch and torchvision are resolved together, as a pair that pin each other, before the project:
# a torch picked alone can be a build that the registry's torchvision cannot load against.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    sed -n '2,8s/^# \{0,1\}//p' "$0" >&2
}

# Qt's X11 window plugin aborts the app when a system library of its is missing: name the
# missing ones and print the exact install command (vitviz/qt_deps.py). Never fails the install.
check_qt_libs() {
    .venv/bin/python -m vitviz.qt_deps || true
}

cpu=0
extras=()
for arg in "$@"; do
    case "$arg" in
        --check-qt) check_qt_libs; exit 0 ;;
        --cpu) cpu=1 ;;
        --families) extras+=(families) ;;
        --test) extras+=(test) ;;
        -h|--help) usage; exit 0 ;;
        *) echo "vitviz: unknown option ${arg}" >&2; usage; exit 2 ;;
    esac
done
spec="."
if ((${#extras[@]})); then
    spec=".[$(IFS=,; echo "${extras[*]}")]"
fi

PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
    "$PYTHON" -m venv .venv
fi
pip_install() { .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"; }

case "$(uname -m)" in
    x86_64|AMD64) torch_pair=("torch==2.14.1" "torchvision==0.29.1") ;;
    *)            torch_pair=("torch==2.9.1" "torchvision==0.24.1") ;;
esac

# PyPI's Linux torch is the CUDA build (with its CUDA libraries, a few GB; it runs on the CPU
# too). The CPU build lives on PyTorch's own index; on x86-64 its versions end in "+cpu", which,
# asked for, keeps a CUDA build of another index (an extra-index-url of pip's configuration) out.
# macOS wheels are CPU-only.
cpu_index="${VITVIZ_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
torch_source=()
if ((cpu)) && [[ "$(uname -s)" == Linux ]]; then
    torch_source=(--index-url "$cpu_index")
    case "$(uname -m)" in
        x86_64|AMD64) torch_pair=("${torch_pair[0]}+cpu" "${torch_pair[1]}+cpu") ;;
    esac
fi

# 0: a working pair of the wanted build is there; 1: none, or it can't load; 2: CUDA, CPU asked.
torch_state=0
.venv/bin/python - "$cpu" <<'PY' 2>/dev/null || torch_state=$?
import sys

import torch
import torchvision.ops  # fails when the two builds do not match

torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
sys.exit(2 if sys.argv[1] == "1" and torch.version.cuda is not None else 0)
PY
if ((torch_state != 0)); then
    echo "vitviz: installing ${torch_pair[*]}${torch_source[*]+ from ${cpu_index}}" \
        "(a few minutes the first time)" >&2
    # ${a[@]+"${a[@]}"}: an empty array under set -u in macOS's bash 3.2
    if ! pip_install ${torch_source[@]+"${torch_source[@]}"} "${torch_pair[@]}"; then
        if ((${#torch_source[@]})); then
            echo "vitviz: the CPU build of torch could not be installed from ${cpu_index}." \
                "Run without --cpu for PyPI's build (it runs on the CPU too, a few GB more)," \
                "or set VITVIZ_TORCH_CPU_INDEX to a mirror of that index." >&2
        fi
        exit 1
    fi
    if ((torch_state == 2)); then
        echo "vitviz: .venv now has the CPU build of torch; the CUDA libraries of the earlier" \
            "one are still in it (rm -rf .venv && bash packaging/install.sh --cpu for a small" \
            ".venv)" >&2
    fi
fi
pip_install -e "${spec}"
check_qt_libs
