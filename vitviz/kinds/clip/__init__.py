"""CLIP-style image-text models (in progress, issue #21): the text side, tested on its own."""
