"""The in-box tools, shipped as package data; scripts/build-box.sh installs them in the image."""
