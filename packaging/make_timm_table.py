"""Write vitviz/kinds/vit/families/timm_archs.json: every timm architecture whose weights look
like a timm ViT (``patch_embed.proj`` + ``blocks.N.attn.qkv``, or EVA's ``q_proj``), described
by vitviz's own reading of the model timm builds on the meta device (``timm_arch.describe``).
Facts about timm's definitions (heads, eps, activation, block kind), no timm code.

    python packaging/make_timm_table.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import timm
import torch

from vitviz.kinds.vit.families.timm_arch import TABLE, describe

OUT = Path(__file__).resolve().parents[1] / "vitviz" / "checkpoints" / "families" / TABLE


def looks_like_timm_vit(keys: list[str]) -> bool:
    """Fused ``qkv``, EVA's separate ``q_proj``/``k_proj``/``v_proj``, or a parallel block's
    fused ``in_proj``."""
    ends = (".attn.qkv.weight", ".attn.q_proj.weight", ".in_proj.weight")
    return "patch_embed.proj.weight" in keys and any(
        k.startswith("blocks.") and k.endswith(ends) for k in keys
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    archs: dict[str, dict] = {}
    start = time.perf_counter()
    failed = []
    for name in timm.list_models():
        try:
            with torch.device("meta"):
                model = timm.create_model(name, pretrained=False)
        except Exception as exc:  # noqa: BLE001 - a name timm can't build without extras
            failed.append(f"{name}: {type(exc).__name__}")
            continue
        if looks_like_timm_vit(list(model.state_dict())):
            archs[name] = describe(name, model).to_json()
    data = {"timm_version": timm.__version__, "archs": archs}
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    took = time.perf_counter() - start
    print(f"{len(archs)} ViT-layout architectures of timm {timm.__version__} -> {args.out}")
    print(f"({took:.0f} s)")
    for line in failed:
        print("  not built:", line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
