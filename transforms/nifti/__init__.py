"""NIfTI-1 and NIfTI-2 volumes (``.nii``, ``.nii.gz``) in the record contract: voxels [k, j, i], LPS affine."""
