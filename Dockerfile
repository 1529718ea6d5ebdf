# Dataflow Flex Template image for `dcm2tfrecord convert`, also its worker image.
#
# Based on Beam's Python SDK image of the Beam version the project is tested
# with (tests/e2e/test_worker_package.py checks the tag against the installed Beam),
# with Google's Flex Template launcher copied in and this project installed, so
# the launcher builds the job with the same code the workers run. Launch it with
# the parameters of metadata.json plus sdk_container_image=<this image>; no
# setup_file is needed then (the package is already installed here).
#
#   docker build -t "$IMAGE" . && docker push "$IMAGE"
#   gcloud dataflow flex-template build "$TEMPLATE" --image "$IMAGE" \
#       --sdk-language PYTHON --metadata-file metadata.json
FROM gcr.io/dataflow-templates-base/python311-template-launcher-base:latest AS template_launcher
FROM apache/beam_python3.11_sdk:2.77.0

COPY --from=template_launcher /opt/google/dataflow/python_template_launcher \
     /opt/google/dataflow/python_template_launcher

ARG WORKDIR=/template
WORKDIR ${WORKDIR}

# The two distributions: dcm2tfrecord-reader (reader_dist/: the format and the reader)
# and the converter (setup.py: pipeline/ and transforms/), which requires it.
COPY setup.py README.md ${WORKDIR}/
COPY reader_dist ${WORKDIR}/reader_dist
COPY pipeline ${WORKDIR}/pipeline
COPY transforms ${WORKDIR}/transforms
COPY dataset ${WORKDIR}/dataset
COPY reader ${WORKDIR}/reader
RUN pip install --no-cache-dir "${WORKDIR}/reader_dist" "${WORKDIR}"

# The launcher runs this file with the template's parameters as --name=value flags.
RUN printf '%s\n' \
    'import sys' \
    'from dcm2tfrecord.pipeline.cli import main' \
    'sys.exit(main(["convert", *sys.argv[1:]]))' > ${WORKDIR}/main.py
ENV FLEX_TEMPLATE_PYTHON_PY_FILE="${WORKDIR}/main.py"
ENV TF_CPP_MIN_LOG_LEVEL=2 CUDA_VISIBLE_DEVICES=-1

# As a worker image Dataflow starts Beam's SDK harness; as a template it runs the launcher.
ENTRYPOINT ["/opt/apache/beam/boot"]
