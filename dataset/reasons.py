"""Stable reason codes for inputs that were not written.

These strings appear in errors.jsonl, dataset.json and Beam counter names;
users grep for them and scripts match on them, so they never change meaning.
"""
SKIPPED = "skipped"
FAILED = "failed"
REJECTED = "rejected"     # a labels-CSV row (not an input) that labels nothing: never counted as an input

# Skipped: the file is fine, but not an image we convert (or a second copy of one we do).
NO_PIXEL_DATA = "no_pixel_data"                  # DICOM without (7FE0,0010): SR, RTPLAN, DICOMDIR...
UNSUPPORTED_FORMAT = "unsupported_format"        # neither DICOM, NIfTI nor a raster image
BURNED_IN_ANNOTATION = "burned_in_annotation"    # Burned In Annotation = YES, without --allow_burned_in
DUPLICATE = "duplicate"                          # same SOPInstanceUID as an earlier file (by sorted uri)

# Failed: the file should have converted and could not.
EMPTY_FILE = "empty_file"
TRUNCATED_FILE = "truncated_file"                # DICOM that ends before its elements or pixel data do
NOT_A_REGULAR_FILE = "not_a_regular_file"        # a FIFO, device or socket among the inputs (or one since): never read
INFLATED_TOO_LARGE = "inflated_too_large"        # Deflated DICOM inflating past its header's pixel data
BROKEN_SYMLINK = "broken_symlink"                # a link whose target does not exist
CHANGED_DURING_RUN = "changed_during_run"        # size, mtime or head bytes differ between probe and write
DECODE_TIMEOUT = "decode_timeout"                # decoding ran past --decode_timeout_s
UNREADABLE = "unreadable"                        # I/O or permission error
INVALID_DICOM = "invalid_dicom"                  # .dcm that does not parse as DICOM
INVALID_IMAGE = "invalid_image"                  # raster whose header does not parse
MISSING_ATTRIBUTE = "missing_attribute"          # Rows, Columns, Bits Allocated... absent
INVALID_VALUE = "invalid_value"                  # an element whose value cannot be parsed
UNSUPPORTED_TRANSFER_SYNTAX = "unsupported_transfer_syntax"
PIXEL_DATA_LENGTH = "pixel_data_length_mismatch"  # truncated or over-long pixel data
DECODE_ERROR = "decode_error"                    # codec failed on the pixel data
TOO_MANY_PIXELS = "too_many_pixels"              # header claims more than --max_pixels
MISSING_LABEL = "missing_label"                  # no row in --labels for this record
MALFORMED_LABEL_ROW = "malformed_label_row"      # a labels CSV line that cannot be used
DUPLICATE_LABEL_ROW = "duplicate_label_row"      # a labels CSV key given again on a later line
UNMATCHED_LABEL_ROW = "unmatched_label_row"      # a labels CSV line whose key no record has
INVALID_LABEL = "invalid_label"                  # a label value that does not parse
INVALID_SPLIT = "invalid_split"                  # a --split_column value that cannot name a split
RECORD_TOO_LARGE = "record_too_large"            # one record exceeds --max_shard_mb
DECODED_SIZE_MISMATCH = "decoded_size_mismatch"  # decoded pixels differ in size from the header's plan
FRAMES_UNORDERED = "frames_unordered"            # Enhanced multi-frame: frames that cannot be put in order
FRAMES_UNEVEN_SPACING = "frames_uneven_spacing"  # Enhanced multi-frame: a stack's frames not evenly spaced
TOO_MANY_FRAMES = "too_many_frames"              # Enhanced multi-frame: more than functional_groups.MAX_FRAMES
MOSAIC_INVALID = "mosaic_invalid"                # a Siemens MOSAIC image whose CSA header does not give its tiling
SERIES_ENHANCED = "series_enhanced"              # --unit series: Enhanced files, or Enhanced and classic, in one series
SERIES_MIXED_SHAPES = "series_mixed_shapes"      # --unit series: slices differ in size or dtype
SERIES_MIXED_ORIENTATION = "series_mixed_orientation"
SERIES_DUPLICATE_POSITION = "series_duplicate_position"
SERIES_UNORDERED = "series_unordered"            # no positions and no instance numbers
SERIES_UNEVEN_SPACING = "series_uneven_spacing"  # slices not evenly spaced (a gap that is no whole slice count)
SERIES_MISSING_SLICES = "series_missing_slices"  # gaps of whole slices: slices absent from the series
SERIES_LOCALIZER = "series_localizer"            # a localizer (scout) among the series' slices
CONTOUR_OFF_GRID = "contour_off_grid"            # RTSTRUCT: a closed contour on no slice of its image series
FRAME_OF_REFERENCE_MISMATCH = "frame_of_reference_mismatch"  # a mask in another frame than its image
MASK_INVALID = "mask_invalid"                    # a segmentation (DICOM SEG) not described as its standard requires
MASK_GRID_MISMATCH = "mask_grid_mismatch"        # a mask whose grid (size, spacing, orientation) is not its image's
MASK_UNREFERENCED = "mask_unreferenced"          # a mask on slices the image does not have
MASK_UNSUPPORTED = "mask_unsupported"            # --class_map: an annotation over images it cannot yet be placed on
INVALID_NIFTI = "invalid_nifti"                  # a NIfTI whose header does not parse (sizeof_hdr, magic, dims...)
UNSUPPORTED_NIFTI = "unsupported_nifti"          # a valid NIfTI no record holds (complex voxels, 5-D, .hdr/.img)
NOT_PNG_ENCODABLE = "not_png_encodable"          # --pixel_encoding png: pixels no PNG holds (float, 32-bit)
MASK_WITHOUT_IMAGE = "mask_without_image"        # --class_map: an annotation whose series is not among the inputs
MISSING_MASK = "missing_mask"                    # --class_map: a series with no annotation (--missing_mask)
MASK_SHARED = "mask_shared"                      # a NIfTI mask named for several images: the first takes it
UNEXPECTED = "unexpected_error"                  # a bug of ours: please report it

DOCUMENTED = {
    NO_PIXEL_DATA: "DICOM object without pixel data (structured report, RT plan, DICOMDIR, ...)",
    UNSUPPORTED_FORMAT: "not DICOM, not NIfTI and not a raster image Pillow reads",
    BURNED_IN_ANNOTATION: "Burned In Annotation is YES (text in the pixels); --allow_burned_in converts it",
    EMPTY_FILE: "zero-byte file",
    TRUNCATED_FILE: "a DICOM file that ends before its data does: an element's length runs past the end "
                    "of the file, or the header describes an image and the file ends before its pixel data; a NIfTI "
                    "image (plain or compressed) that ends before the voxels its header describes",
    NOT_A_REGULAR_FILE: "a FIFO (named pipe), device or socket matched as an input, or that an input became "
                        "before it was read (replaced, or a link pointed at one): not read (local inputs)",
    INFLATED_TOO_LARGE: "a Deflated Explicit VR Little Endian file that inflates past the pixel data its "
                        "header describes plus 32 MiB (a decompression bomb); inflating stops there",
    BROKEN_SYMLINK: "a symbolic link whose target does not exist (local inputs)",
    DUPLICATE: "same SOPInstanceUID as another file; the first by sorted uri is kept (skipped)",
    CHANGED_DURING_RUN: "the file's size or modification time changed between probe and write, or its first "
                        "64 KiB (and at least its SOP Instance UID) are not the bytes it was probed from: "
                        "replaced by another file of the same size and time (rsync -a, cp -p), or a directory "
                        "now; convert again",
    DECODE_TIMEOUT: "decoding took longer than --decode_timeout_s",
    UNREADABLE: "the file could not be read (permissions, I/O error, vanished)",
    INVALID_DICOM: "named or sniffed as DICOM but the header does not parse",
    INVALID_IMAGE: "a raster image whose header or data Pillow cannot read",
    MISSING_ATTRIBUTE: "a required Image Pixel module attribute is absent",
    INVALID_VALUE: "an element value cannot be parsed (e.g. invalid VR content)",
    UNSUPPORTED_TRANSFER_SYNTAX: "no installed decoder handles the transfer syntax",
    PIXEL_DATA_LENGTH: "pixel data shorter or longer than Rows x Columns x Frames x Bits",
    DECODE_ERROR: "the codec raised while decoding the pixel data",
    TOO_MANY_PIXELS: "the header claims more pixels than --max_pixels",
    MISSING_LABEL: "no label for this record in --labels (counted as skipped with --missing_label skip)",
    MALFORMED_LABEL_ROW: "a labels CSV line with the wrong number of fields or an empty key (uri is csv:line)",
    DUPLICATE_LABEL_ROW: "a labels CSV key already given on an earlier line; the first line counts (uri is csv:line)",
    UNMATCHED_LABEL_ROW: "a labels CSV line whose key no converted input has (a file that does not exist, "
                         "or that was skipped or failed): it labels nothing and makes no class (uri is csv:line)",
    INVALID_LABEL: "a label value that does not parse as the column's kind",
    INVALID_SPLIT: "a --split_column value that is empty or cannot be part of a file name ('/', '..')",
    RECORD_TOO_LARGE: "a single record is larger than --max_shard_mb",
    DECODED_SIZE_MISMATCH: "the decoded pixels differ in size from what the header promised, on which "
                           "the shard's size was planned",
    FRAMES_UNORDERED: "an Enhanced multi-frame image whose frames cannot be put in order: two frames of "
                      "one stack at the same position, or positions on some frames only; --frames split "
                      "converts each frame",
    MOSAIC_INVALID: "a Siemens MOSAIC image (Image Type MOSAIC) whose CSA Image Header Info (0029,xx10) is "
                    "missing or does not parse, or gives no NumberOfImagesInMosaic that tiles its Rows and "
                    "Columns (or a SliceNormalVector not normal to its orientation): its slices cannot be "
                    "told apart",
    TOO_MANY_FRAMES: "an Enhanced multi-frame image of more than 50,000 frames, or whose Per-frame Functional "
                     "Groups Sequence takes more than 64 MiB (docs/DICOM.md): its per-frame functional groups "
                     "are not read",
    FRAMES_UNEVEN_SPACING: "an Enhanced multi-frame image one of whose stacks is not evenly spaced along the "
                           "slice normal (a gap, missing frames): never stacked as contiguous; --frames split "
                           "converts each frame",
    SERIES_ENHANCED: "--unit series: a series made of several Enhanced multi-frame files (or of Enhanced "
                     "and single-frame files); each Enhanced file is converted as its own volumes with "
                     "--unit file",
    SERIES_MIXED_SHAPES: "--unit series: the series' slices differ in rows, columns, channels or dtype",
    SERIES_MIXED_ORIENTATION: "--unit series: the slices have different Image Orientation (Patient)",
    SERIES_DUPLICATE_POSITION: "--unit series: two slices at the same position (or same Instance Number) "
                               "that no time, b-value, gradient, echo or acquisition number tells apart as "
                               "volumes of a 4-D series",
    SERIES_UNORDERED: "--unit series: no Image Position/Orientation and no Instance Number to order by",
    SERIES_UNEVEN_SPACING: "--unit series: the slices are not evenly spaced along the slice normal (beyond "
                           "the tolerance, docs/DICOM.md); --series_gaps split writes each even run as a volume",
    SERIES_MISSING_SLICES: "--unit series: a gap of a whole number of slices: slices of the series are missing "
                           "from the input; --series_gaps split writes each even run as a volume",
    SERIES_LOCALIZER: "--unit series: a localizer (scout, another orientation) is among the slices; "
                      "--series_gaps split writes it as a record of its own",
    CONTOUR_OFF_GRID: "an RTSTRUCT closed contour that lies on no slice of the image series it is rasterised "
                      "onto (more than half the slice spacing from every slice along the normal, or wholly "
                      "outside its rows and columns); the message names the ROI by number",
    FRAME_OF_REFERENCE_MISMATCH: "a structure set ROI whose Referenced Frame of Reference UID differs from "
                                 "the Frame of Reference UID of the image series it is rasterised onto, or a "
                                 "DICOM SEG placed by position whose Frame of Reference UID is not its image's",
    MASK_INVALID: "a segmentation that is not one as its standard describes: a DICOM file that is no "
                  "Segmentation, or a SEG without a Segment Sequence, with a frame naming no (or an undescribed) "
                  "segment, or two frames of one segment on one slice; a NIfTI mask holding values that are "
                  "no class indices (fractions, negatives) or several channels, or a mask path (--mask_column "
                  "value, --mask_pattern replacement) that names no file below the --input root",
    MASK_GRID_MISMATCH: "a mask that does not lie on its image's grid: other Rows/Columns, Pixel Spacing or "
                        "Image Orientation (Patient), frames whose spatial locations were not preserved, a frame "
                        "away from the slice it names; a NIfTI mask of another shape, volume count or affine "
                        "than its image's; masks are never resampled",
    MASK_UNREFERENCED: "a mask with a frame on a slice the image does not have (a SOP Instance UID not among its "
                       "slices, or a position no slice has), or a frame it cannot place (no source image, no "
                       "position)",
    MASK_UNSUPPORTED: "--class_map --unit file: an RTSTRUCT over a series with multi-frame images (frames of "
                      "--frames split, Enhanced stacks): its contours are placed on single-frame slices only",
    INVALID_NIFTI: "a NIfTI-1/NIfTI-2 file (plain or compressed) whose header does not parse: sizeof_hdr neither "
                   "348 nor 540, a wrong magic, impossible dims, an unknown datatype code, a qform quaternion "
                   "of no rotation, or a corrupt compressed stream",
    UNSUPPORTED_NIFTI: "a valid NIfTI no record holds: complex, float128 or binary voxels, a 5-D or higher "
                       "image, or the .hdr of a .hdr/.img pair (its voxels are in the .img)",
    NOT_PNG_ENCODABLE: "--pixel_encoding png: a record whose pixels no PNG image holds: floating-point or "
                       "32-bit values, or more than 4 channels",
    MASK_WITHOUT_IMAGE: "--class_map: a SEG or RTSTRUCT whose referenced series has no image among the inputs "
                        "(its uri is the annotation); a NIfTI mask --mask_pattern recognises (or an image names) "
                        "that pairs with no image record",
    MISSING_MASK: "--class_map: a series no SEG or RTSTRUCT annotates; --missing_mask skip (skipped), error "
                  "(failed) or empty (written with an all-background mask); with --mask_pattern or "
                  "--mask_column, an image whose mask file is not among the converted inputs",
    MASK_SHARED: "a NIfTI mask that --mask_pattern or --mask_column names for several images: the first image by "
                 "path takes it, the others fail; give each image its own mask file",
    UNEXPECTED: "an exception the converter did not anticipate (a bug: please report it)",
}
