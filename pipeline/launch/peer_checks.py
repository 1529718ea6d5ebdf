"""The worker socket trusts no one (issue 35, item 3): the checks both of its ends make.

Its folder (0700) is made only under a parent that others cannot rename it out of (not
world-writable, or sticky: an unsafe ``TMPDIR`` is passed over for /tmp, else the workers
are spawned), bound through the folder's handle, and checked again by each client (same
device and inode, owner, mode) before it connects; each end checks the other's credentials
(``SO_PEERCRED``: the client that the listener is the fork server, pid and uid; the server
that the client is this user's) before a byte is sent; and a client never sends
``$DCM2TFRECORD_ID_SALT`` (workers get the salt in their settings). The client's program
(:func:`client_source`) is this module's :func:`peer_refusal` and the standard library only.
"""
from __future__ import annotations

import os
import socket
import stat
import struct
import tempfile
import textwrap

SOCKET_NAME = "workers.sock"
_MAX_SOCKET_PATH = 100      # sockaddr_un's sun_path holds 108 bytes, the last a NUL

SALT_ENV = "DCM2TFRECORD_ID_SALT"   # never sent to a worker (pipeline/options/salt.py's; not imported: no cycle)

# How a client ends when it sends nothing: the exit statuses the launcher names (WorkersWatch);
# a worker killed by signal N ends its client with 128 + N, as a shell reports it
REFUSED_FOLDER = 211    # the socket's folder is not the one the launcher made (replaced, not 0700, not ours)
REFUSED_PEER = 212      # the process listening on the socket is not the fork server (SO_PEERCRED)
SERVER_GONE = 213       # no fork server answered, or it went before the worker's status


def peer_refusal(creds, uid, pid=None):
    """Why the process at the other end of a worker socket is not the one expected, or ""
    when it is. ``creds`` is SO_PEERCRED's (pid, uid, gid); ``uid`` the user it must run
    as; ``pid`` (the client's check of the fork server) the process it must be. Standard
    library only: the worker client runs this very source (see ``client_source``)."""
    peer_pid, peer_uid = creds[0], creds[1]
    if peer_uid != uid:
        return "it runs as uid %d, not as uid %d" % (peer_uid, uid)
    if pid is not None and peer_pid != pid:
        return "it is process %d, not the fork server (process %d)" % (peer_pid, pid)
    return ""


# the worker command: no site-packages, no project import; only the standard library.
# argv: the socket's folder, its device and inode, the uid and pid of the fork server
_CLIENT_MAIN = """
signal.signal(signal.SIGINT,signal.SIG_IGN)
folder,dev,ino,uid,pid=sys.argv[1],*map(int,sys.argv[2:6])
try:
 fd=os.open(folder,os.O_RDONLY|os.O_DIRECTORY|os.O_NOFOLLOW)
 st=os.fstat(fd)
except OSError:
 sys.exit(%(folder)d)
if (st.st_dev,st.st_ino)!=(dev,ino) or st.st_uid!=uid or st.st_mode&0o077:
 sys.exit(%(folder)d)
via='/proc/self/fd/%%d'%%fd
s=socket.socket(socket.AF_UNIX)
try:
 s.connect(os.path.join(via if os.path.isdir(via) else folder,'%(name)s'))
 creds=struct.unpack('3i',s.getsockopt(socket.SOL_SOCKET,socket.SO_PEERCRED,12))
except OSError:
 sys.exit(%(gone)d)
if peer_refusal(creds,uid,pid):
 sys.exit(%(peer)d)
e=dict(os.environ)
e.pop('%(salt)s',None)
e=json.dumps(e).encode()
d=b''
try:
 s.sendall(len(e).to_bytes(8,'little')+e)
 while True:
  c=s.recv(64)
  if not c:break
  d+=c
except OSError:
 d=b''
sys.exit(int(d) if d.strip() else %(gone)d)
"""


def client_source() -> str:
    """The worker client's program: ``peer_refusal``'s own source, then the client."""
    import inspect
    return ("import json,os,signal,socket,struct,sys\n" + textwrap.dedent(inspect.getsource(peer_refusal))
            + _CLIENT_MAIN % {"folder": REFUSED_FOLDER, "peer": REFUSED_PEER, "gone": SERVER_GONE,
                              "name": SOCKET_NAME, "salt": SALT_ENV})


def folder_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def open_folder(folder: str) -> int:
    """A handle on the socket folder just made: this user's, 0700, not a link."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        os.close(fd)
        raise OSError(f"the worker socket folder {folder} is not this user's own")
    return fd


def through(fd: int, folder: str) -> str:
    """The socket's name through the folder's handle (/proc/self/fd), where Linux has it."""
    via = f"/proc/self/fd/{fd}"
    return os.path.join(via if os.path.isdir(via) else folder, SOCKET_NAME)


def unsafe_parent(folder: str) -> str:
    """The first of ``folder`` and its parents where someone else could rename a folder of
    ours away and put their own in its place, or "": one that others (its group included)
    may write without the sticky bit, or that belongs to another user than root or us.
    """
    path = os.path.realpath(folder)
    me = os.getuid()
    while True:
        st = os.stat(path)
        if st.st_uid not in (0, me) or (st.st_mode & (stat.S_IWOTH | stat.S_IWGRP)
                                        and not st.st_mode & stat.S_ISVTX):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return ""
        path = parent


def socket_folder() -> str:
    """A new private folder for the socket: under the temp folder, or /tmp where that is
    unsafe (:func:`unsafe_parent`) or its path too long for a Unix socket's name (about 107
    bytes on Linux). OSError (the workers are then spawned) where neither will do."""
    tried = []
    for parent in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        tried.append(parent)
        try:
            if unsafe_parent(parent):
                continue
        except OSError:
            continue
        folder = tempfile.mkdtemp(prefix="dcm2tfrecord-workers-", dir=parent)
        if len(os.fsencode(os.path.join(folder, SOCKET_NAME))) <= _MAX_SOCKET_PATH:
            return folder
        os.rmdir(folder)
    raise OSError(f"no temp folder safe and short enough for the workers' Unix socket (tried {', '.join(tried)})")


def client_allowed(conn: socket.socket) -> bool:
    """Whether the client runs as this user (SO_PEERCRED; a 0700 folder should see to it)."""
    try:
        creds = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        return False
    return not peer_refusal(creds, os.getuid())
