"""A local GCS for tests: ``gcp-storage-emulator`` on a loopback port.

``gcs_emulator`` (module scope) starts the emulator in a subprocess with one
bucket, and points every Google client in this process and its children at it:

- ``STORAGE_EMULATOR_HOST``: google-cloud-storage (what Beam's gcsio uses)
  sends its requests to the emulator.
- ``GOOGLE_APPLICATION_CREDENTIALS``: a fake "authorized_user" file holding an
  access token valid until 2999. Beam looks credentials up through
  ``google.auth.default()`` with 4 retries and exponential back-off; with
  nothing found that costs ~25 s per process before it falls back to an
  anonymous client. With this file the lookup succeeds at once, offline, and
  the token is never refreshed (so nothing calls oauth2.googleapis.com); the
  emulator ignores the Authorization header.
- ``GOOGLE_CLOUD_PROJECT`` and ``NO_GCE_CHECK``: no gcloud or GCE metadata probing.

Being environment variables, these also reach Beam's worker processes and
any ``subprocess`` a test starts (``run_dataflow.sh``). TensorFlow's own GCS
client (``tf.io.gfile`` on gs://) does not honour the emulator: read results
back after copying them locally (``download_tree``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Optional

import pytest

BUCKET = "dcm2tfrecord-test"
PROJECT = "dcm2tfrecord-test-project"

_FAKE_ADC = {
    "type": "authorized_user", "client_id": "emulator", "client_secret": "emulator",
    "refresh_token": "emulator", "token": "emulator-token", "expiry": "2999-01-01T00:00:00Z",
}


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclasses.dataclass
class GcsEmulator:
    host: str            # http://127.0.0.1:PORT
    bucket: str
    env: dict            # the variables set for it (to pass to subprocesses explicitly)
    proc: Optional[subprocess.Popen] = None

    def stop(self) -> None:
        """Kills the emulator: storage is gone, as in an outage (its in-memory data too)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def url(self, path: str = "") -> str:
        return f"gs://{self.bucket}/{path.lstrip('/')}"

    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage
        return storage.Client(project=PROJECT, credentials=AnonymousCredentials())

    def upload_tree(self, local_dir: str, prefix: str) -> list[str]:
        """Copies every file under ``local_dir`` to gs://bucket/prefix/...; returns the uris."""
        bucket = self.client().bucket(self.bucket)
        uris = []
        for folder, _, files in os.walk(local_dir):
            for name in sorted(files):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
                blob_name = f"{prefix.strip('/')}/{rel}"
                bucket.blob(blob_name).upload_from_filename(path)
                uris.append(self.url(blob_name))
        return uris

    def upload_file(self, local_path: str, blob_name: str) -> str:
        self.client().bucket(self.bucket).blob(blob_name).upload_from_filename(local_path)
        return self.url(blob_name)

    def list(self, prefix: str) -> list[str]:
        return sorted(b.name for b in self.client().list_blobs(self.bucket, prefix=prefix.strip("/") + "/"))

    def download_tree(self, prefix: str, local_dir: str) -> list[str]:
        """Copies every object under gs://bucket/prefix/ into ``local_dir``; returns rel paths."""
        prefix = prefix.strip("/") + "/"
        rels = []
        for blob in self.client().list_blobs(self.bucket, prefix=prefix):
            rel = blob.name[len(prefix):]
            target = os.path.join(local_dir, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            blob.download_to_filename(target)
            rels.append(rel)
        return sorted(rels)


def _wait_ready(host: str, bucket: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    url = f"{host}/storage/v1/b/{bucket}"
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"gcp-storage-emulator exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"gcp-storage-emulator not ready at {url} after {timeout:.0f} s")
        time.sleep(0.1)


def _reset_beam_credentials_cache() -> None:
    """Beam caches the credentials it found once per process; forget them."""
    try:
        from apache_beam.internal.gcp import auth
    except ImportError:
        return
    creds = getattr(auth, "_Credentials", None)
    if creds is not None and hasattr(creds, "_credentials_init"):
        creds._credentials_init = False
        creds._credentials = None


def _listening(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on 127.0.0.1:``port`` (Linux /proc).
    Two test workers can draw the same free port: the later emulator then fails to bind, and
    the earlier one answers the later one's readiness check, until its module ends and it goes
    (the later module's tests then meet "connection refused")."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        with open("/proc/net/tcp") as handle:
            rows = [line.split() for line in handle.readlines()[1:]]
    except OSError:
        return True                       # no /proc: nothing to check by
    ours = set()
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            ours.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return any(int(row[1].rsplit(":", 1)[1], 16) == port and row[3] == "0A" and f"socket:[{row[9]}]" in ours
               for row in rows)


@contextlib.contextmanager
def running_emulator(workdir: str, bucket: str = BUCKET, port: Optional[int] = None):
    """Starts the emulator, sets the environment, yields a GcsEmulator; undoes it all."""
    for _ in range(5):
        with _started(workdir, bucket, port or free_port()) as started:
            if started is not None:
                yield started
                return
        if port:
            break
    raise RuntimeError(f"gcp-storage-emulator did not start on its own port (log in {workdir})")


@contextlib.contextmanager
def _started(workdir: str, bucket: str, port: int):
    """The emulator on ``port``, or None where another process holds that port."""
    host = f"http://127.0.0.1:{port}"
    log_path = os.path.join(workdir, "gcs_emulator.log")
    adc_path = os.path.join(workdir, "fake_adc.json")
    with open(adc_path, "w") as handle:
        json.dump(_FAKE_ADC, handle)
    env = {
        "STORAGE_EMULATOR_HOST": host,
        "GOOGLE_APPLICATION_CREDENTIALS": adc_path,
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "NO_GCE_CHECK": "True",
    }
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
         "--port", str(port), "--in-memory", "--default-bucket", bucket, "--quiet"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
    saved = {k: os.environ.get(k) for k in env}
    try:
        _wait_ready(host, bucket, proc)
        if not _listening(proc.pid, port):
            yield None
            return
        os.environ.update(env)
        _reset_beam_credentials_cache()
        yield GcsEmulator(host=host, bucket=bucket, env=env, proc=proc)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reset_beam_credentials_cache()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def gcs_emulator(tmp_path_factory):
    with running_emulator(str(tmp_path_factory.mktemp("gcs_emulator"))) as emulator:
        yield emulator
