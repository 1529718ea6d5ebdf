"""Patient identity put into test DICOM files (e2e/test_no_identity_in_outputs.py,
transforms/dicom/test_metadata_identity.py)."""
import pydicom


TEXT_VRS = frozenset("AE AS CS DA DS DT IS LO LT PN SH ST TM UC UI UR UT".split())


STANDARD_UID_ROOT = "1.2.840.10008."


def _identify(ds, name: str, patient_id: str, n: int) -> None:
    """Fills the attributes de-identification profiles remove (PS3.15 E.1-1), nested ones too."""
    uid = f"1.2.826.0.1.3680043.9.7771.{patient_id}"
    ds.PatientName, ds.PatientID = name, f"MRN{patient_id}"
    ds.PatientBirthDate, ds.PatientAge, ds.PatientSex = "19580312", "066Y", "F"
    ds.OtherPatientIDs = f"ALT{patient_id}"
    ds.InstitutionName, ds.InstitutionAddress = "St Elsewhere Hospital", "12 Harbour Road, Leith"
    ds.StationName, ds.OperatorsName = "CTSTATION07", "Tech^Terry"
    ds.ReferringPhysicianName, ds.StudyID = "Doctor^Who", f"STY{patient_id}"
    ds.StudyDate, ds.StudyTime, ds.SeriesDate = "20240229", "134501.250", "20240301"
    ds.AccessionNumber = f"ACC{patient_id}"
    ds.StudyDescription, ds.SeriesDescription = "CHEST WITH CONTRAST", f"AXIAL {name}"
    ds.StudyInstanceUID, ds.SeriesInstanceUID = f"{uid}.1", f"{uid}.2.{n // 10}"
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = f"{uid}.3.{n}"
    ds.FrameOfReferenceUID = f"{uid}.4"
    ds.file_meta.SourceApplicationEntityTitle = "PACSNODE9"
    request = pydicom.Dataset()
    request.RequestedProcedureID, request.ScheduledProcedureStepID = f"RP{patient_id}", f"SPS{patient_id}"
    request.RequestedProcedureDescription = f"Follow-up for {name}"
    other = pydicom.Dataset()
    other.PatientID, other.IssuerOfPatientID = f"NHS{patient_id}", "Lothian Health Board"
    request.OtherPatientIDsSequence = pydicom.Sequence([other])
    ds.RequestAttributesSequence = pydicom.Sequence([request])
