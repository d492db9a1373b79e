"""The Swin kind's checkpoint families: torchvision, timm and Hugging Face layouts."""
