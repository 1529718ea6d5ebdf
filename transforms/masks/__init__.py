"""Segmentation masks aligned voxel for voxel with the image records they label (issue 33)."""
