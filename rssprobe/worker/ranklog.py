"""A launched rank's own log (rank<N>.log), kept beside the launcher's interleaved stream.

A rank the user's launcher started writes to the launcher's stdout (the console and worker.log get every rank
interleaved, as without rssprobe); the docs promise each rank's output on its own too. `tee -a` sits behind this
process's stdout and stderr: it copies every byte to the rank's log and on to where the output went before, and
ends when the rank's last descriptor closes, so nothing written at exit (a traceback) is lost, which a copying
thread of a dying interpreter cannot promise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def tee(log: Path) -> bool:
    """Send fds 1 and 2 through `tee -a log` to the former fd 1; False (output untouched) without tee."""
    exe = shutil.which("tee")
    if exe is None:
        return False
    proc = subprocess.Popen([exe, "-a", str(log)], stdin=subprocess.PIPE, stdout=os.dup(1), stderr=subprocess.DEVNULL,
                            close_fds=True, start_new_session=False)
    assert proc.stdin is not None
    fd = proc.stdin.fileno()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    proc.stdin.close()  # fds 1 and 2 hold the pipe now; tee ends when they close
    return True
