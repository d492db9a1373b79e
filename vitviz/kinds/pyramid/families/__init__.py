"""The pyramid ViT kind's checkpoint families: timm's PVT v2 (bare state dicts and folders)."""
