"""Masks and regions: segmentation labels aligned voxel for voxel with their images (issue 33)."""
