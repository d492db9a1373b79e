"""Model kinds: each kind of network vitviz explains (ViT, Swin, ...) is one package here, a
plug-in of the shared layers beneath it. The contract they meet, and the registry that finds
them by the package names it lists, is ``vitviz.kindapi`` (DESIGN §3)."""
