#!/usr/bin/env bash
# Register vitviz with the desktop for the current user: menu entry, icon, MIME types, so that
# "Open with vitviz" works for images and checkpoints. Undo with --uninstall.
#   bash packaging/linux/install-desktop.sh [--uninstall] [--exec /path/to/vitviz]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
apps="$data/applications"; mime="$data/mime"; icons="$data/icons/hicolor"

exec_path=""
uninstall=0
while (($#)); do
    case "$1" in
        --uninstall) uninstall=1 ;;
        --exec) exec_path="$2"; shift ;;
        *) echo "usage: $0 [--uninstall] [--exec PATH]" >&2; exit 2 ;;
    esac
    shift
done

refresh() {
    command -v update-desktop-database >/dev/null && update-desktop-database -q "$apps" || true
    command -v update-mime-database >/dev/null && update-mime-database "$mime" || true
    command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$icons" || true
}

if ((uninstall)); then
    rm -f "$apps/vitviz.desktop" "$mime/packages/vitviz-mime.xml" "$icons/scalable/apps/vitviz.svg"
    for size in 16 24 32 48 64 128 256 512; do
        rm -f "$icons/${size}x${size}/apps/vitviz.png"
    done
    refresh
    echo "vitviz: desktop entry, icons and MIME types removed"
    exit 0
fi

if [[ -z "$exec_path" ]]; then
    if [[ -x "$root/.venv/bin/vitviz" ]]; then exec_path="$root/.venv/bin/vitviz";
    elif command -v vitviz >/dev/null; then exec_path="$(command -v vitviz)";
    else echo "vitviz: no vitviz executable found; run packaging/install.sh first or pass --exec" >&2; exit 1
    fi
fi

mkdir -p "$apps" "$mime/packages" "$icons/scalable/apps"
sed -e "s|^Exec=vitviz |Exec=$exec_path |" -e "s|^TryExec=vitviz$|TryExec=$exec_path|" \
    "$here/vitviz.desktop" > "$apps/vitviz.desktop"
cp "$here/vitviz-mime.xml" "$mime/packages/vitviz-mime.xml"
cp "$root/resources/icons/vitviz.svg" "$icons/scalable/apps/vitviz.svg"
for size in 16 24 32 48 64 128 256 512; do
    mkdir -p "$icons/${size}x${size}/apps"
    cp "$root/resources/icons/vitviz-$size.png" "$icons/${size}x${size}/apps/vitviz.png"
done
refresh
echo "vitviz: installed $apps/vitviz.desktop (runs $exec_path)"
