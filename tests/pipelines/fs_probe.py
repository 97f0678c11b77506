"""A task stand-in for tests/pipelines/test_forkserver.py: says where it ran, exits with PROBE_EXIT."""

import os
import sys

print(f"pid={os.getpid()} ppid={os.getppid()} cwd={os.getcwd()} probe={os.environ.get('PROBE')} args={sys.argv[1:]}")
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
