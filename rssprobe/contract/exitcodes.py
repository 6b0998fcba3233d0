"""The exit codes a worker (or a command) ends with that the other side tells apart.

Part of the contract (rssprobe/contract/): stdlib only."""

import signal

EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: a worker (or command) ended by SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130: by Ctrl-C
EXIT_NO_WORKER = 3  # a worker started under the test lane's knob (testlane.NO_WORKER_ENV): it trained nothing
