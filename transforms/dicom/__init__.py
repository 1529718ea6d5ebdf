"""DICOM: header facts, pixel decoding and value mapping, the native shortcut, VOI windowing."""
